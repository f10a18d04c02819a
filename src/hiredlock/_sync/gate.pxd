# ThreadGate as an extension type, when Cython compiles gate.py (see hiredlock/_compiled.py): each
# of its calls is one call into C (LocalGate's methods, from a lock's state: C calls), and its
# fields (ThreadGate.__slots__) are read in C.

cimport cython

from hiredlock._core.local_gate cimport LocalGate
from hiredlock._core.state_mutex cimport StateMutex


cdef class ThreadGate(LocalGate):
    cdef public unsigned long _holder  # (a thread's ident: see _me)
    cdef public StateMutex _mutex  # (taken in C: see state_mutex.pxd)
    cdef public set _waiters
    cdef public object _wake

    cdef _init(self, StateMutex mutex)

    # (LocalGate's, with the thread's ident in a C integer)
    @cython.locals(me="unsigned long")
    cpdef bint try_enter(self) except -1


@cython.locals(gate=ThreadGate)
cpdef ThreadGate gate_on(StateMutex mutex)


# The calling thread's ident, as threading.get_ident gives it (PyThread_get_thread_ident)
cdef extern from "pythread.h":
    unsigned long thread_ident "PyThread_get_thread_ident" () nogil


@cython.locals(me="unsigned long")
cpdef unsigned long _me() except? 0
