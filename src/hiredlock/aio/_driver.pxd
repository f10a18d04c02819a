# Driver as an extension type, when Cython compiles _driver.py (see hiredlock/_compiled.py): it
# runs in every loop callback of a round (on_readable, update), and reads its fields in C. The
# fields are Driver.__slots__ (tests/test_compiled.py checks that both say the same). The methods
# below are called in C: by each other, and by AsyncRounds (aio/_rounds.pxd) for start(); the
# cdef ones only from this module.

cdef class Driver:
    cdef public object closes
    cdef public bint keep
    cdef public object loop
    cdef public object on_end
    cdef public set readers
    cdef public object rnd
    cdef public object seen
    cdef public object timer
    cdef public object timer_due_ns
    cdef public dict wanted
    cdef public set writers

    cpdef start(self, rnd, on_end)
    cpdef give_up(self)
    cdef _feed(self, long fd, bint readable, bint writable)
    cpdef update(self)
    cdef _register(self, dict wanted)
    cdef _set_timer(self, due_ns)
    cdef _end_round(self)
    cdef _check_closes(self)
    cpdef clear(self)
