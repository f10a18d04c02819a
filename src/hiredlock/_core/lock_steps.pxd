# LockBase as an extension type, when Cython compiles lock_steps.py (see hiredlock/_compiled.py):
# a subclass of LockState's (lock_state.pxd), so that its steps read the lock's fields in C. It adds
# no field (LockBase.__slots__ is empty); the API classes call the methods below in C.

from hiredlock._core.clock cimport monotonic_ns as _monotonic_ns
from hiredlock._core.judgement cimport (
    oks as _oks,
    says_more as _says_more,
    valid_until_ns as _valid_until_ns,
    won as _round_won,
)
from hiredlock._core.lock_state cimport LockState
from hiredlock._core.requests cimport heard_on
from hiredlock._core.tokens cimport new_token

# (fork.py's count, read in C: a list index with no module lookup)
cdef list _fork_generation


cdef class LockBase(LockState):
    # (called in C by Lock.acquire, _lock.pxd: on every acquire's path)
    cpdef _turn_gate(self, blocking, object_gate)
    cpdef _end_turn(self, turn)
    cpdef _acquire_steps(self, blocking, deadline_ns, turn=*)


cpdef acquire_deadline(blocking, timeout, blocking_timeout)
