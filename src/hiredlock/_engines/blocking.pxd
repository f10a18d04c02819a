# The blocking client's rounds compiled (see hiredlock/_compiled.py): run_one, which the direct
# form of a lock's steps (_sync/blocking_steps.py's run_round) calls for every round, calls the
# pool's checkout and checkin (pool.pxd) and a native engine's run and owes_replies (_native.pxd)
# in C. The fields are BlockingRounds.__slots__.

cimport cython
from hiredlock._engines.pool cimport EnginePool
from hiredlock._native cimport NativeEngine


cdef class BlockingRounds:
    cdef public EnginePool pool
    cdef public object run


@cython.locals(native=NativeEngine, owes=bint)
cpdef run_one(EnginePool pool, request, list pin=*)
