# Lock as an extension type, when Cython compiles _lock.py (see hiredlock/_compiled.py): a subclass
# of LockBase's (lock_steps.pxd), so that acquire() and release() read the lock's fields and call
# its steps' methods, and their direct form (_sync/blocking_steps.pxd), in C. It adds no field
# (Lock.__slots__ is empty) and no C method (the kinds made by LockBase's tp_new, FairLock(FairBase,
# Lock) and the like, carry LockBase's table of C methods); WithStatement, a Python class, comes
# after LockBase among its bases (an extension type's first base must be one).

cimport cython
from hiredlock._core.lock_steps cimport LockBase, acquire_deadline
from hiredlock._sync.gate cimport gate_on
from hiredlock._sync.blocking_steps cimport (
    acquire_steps_direct,
    direct_acquire,
    direct_release,
    release_steps_direct,
)

# (fork.py's count, read in C: a list index with no module lookup)
cdef list _fork_generation


cdef class Lock(LockBase):
    pass


@cython.locals(lock=Lock)
cpdef Lock new_lock(client, name, ttl)
