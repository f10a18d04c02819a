# TaskGate as an extension type, when Cython compiles _gate.py (see hiredlock/_compiled.py): a
# lock's state calls LocalGate's methods in C (local_gate.pxd), and those of a TaskGate are then C
# calls too, not Python methods found by name at every call. Its fields are TaskGate.__slots__.

from hiredlock._core.local_gate cimport LocalGate


cdef class TaskGate(LocalGate):
    cdef public bint _held
    cdef public object _waiters
    cdef public object owner
