# LocalGate as an extension type, when Cython compiles local_gate.py (see hiredlock/_compiled.py):
# lock_state.pxd types a lock's gate with it, so that try_enter, mine, is_held, leave and
# leave_under_mutex, on every acquire's and release's path, are C calls (to ThreadGate's,
# _sync/gate.pxd, and TaskGate's, aio/_gate.pxd, which override them without declaring them
# again).

cdef class LocalGate:
    cpdef bint is_held(self) except -1
    cpdef bint try_enter(self) except -1
    cpdef bint mine(self) except -1
    cpdef leave(self)
    cpdef bint leave_under_mutex(self) except -1
