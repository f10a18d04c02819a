# ThreadGate as an extension type, when Cython compiles gate.py (see hiredlock/_compiled.py): each
# of its calls is one call into C (LocalGate's methods, from a lock's state: C calls), and its
# fields (ThreadGate.__slots__) are read in C.

from hiredlock._core.local_gate cimport LocalGate


cdef class ThreadGate(LocalGate):
    cdef public dict _holder
    cdef public set _waiters
    cdef public object _wake

    cpdef bint is_held(self) except -1
    cpdef bint try_enter(self) except -1
    cpdef bint mine(self) except -1
    cpdef leave(self)
