# ThreadGate as an extension type, when Cython compiles gate.py (see hiredlock/_compiled.py): each
# of its calls is one call into C (LocalGate's methods, from a lock's state: C calls), and its
# fields (ThreadGate.__slots__) are read in C.

from hiredlock._core.local_gate cimport LocalGate
from hiredlock._core.state_mutex cimport StateMutex


cdef class ThreadGate(LocalGate):
    cdef public object _holder
    cdef public StateMutex _mutex  # (taken in C: see state_mutex.pxd)
    cdef public set _waiters
    cdef public object _wake
