# ThreadGate as an extension type, when Cython compiles gate.py (see hiredlock/_compiled.py): each
# of its calls is one call into C, and its fields (ThreadGate.__slots__) are read in C.

cdef class ThreadGate:
    cdef public dict _holder
    cdef public set _waiters
    cdef public object _wake
