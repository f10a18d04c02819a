# BlockingRounds as an extension type, when Cython compiles blocking.py (see
# hiredlock/_compiled.py): the direct form of a lock's steps (_sync/blocking_steps.py's run_round)
# reads its pool's checkout and checkin in C before each round. The fields are
# BlockingRounds.__slots__.


cdef class BlockingRounds:
    cdef public object checkin
    cdef public object checkout
    cdef public object pool
    cdef public object run
