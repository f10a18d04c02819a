# Driver as an extension type, when Cython compiles _driver.py (see hiredlock/_compiled.py): it
# runs in every loop callback of a round (on_readable, update), and reads its fields in C. The
# fields are Driver.__slots__ (tests/test_compiled.py checks that both say the same).

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
