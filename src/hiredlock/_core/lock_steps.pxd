# LockBase as an extension type, when Cython compiles lock_steps.py (see hiredlock/_compiled.py):
# a subclass of LockState's (lock_state.pxd), so that its steps read the lock's fields in C. It adds
# no field (LockBase.__slots__ is empty).

from hiredlock._core.judgement cimport oks as _oks, won as _round_won
from hiredlock._core.lock_state cimport LockState


cdef class LockBase(LockState):
    pass
