# AsyncLock as an extension type, when Cython compiles aio/_lock.py (see hiredlock/_compiled.py): a
# subclass of LockBase's (lock_steps.pxd), so that acquire() and release() read the lock's fields
# and call its steps' methods in C. It adds no field (AsyncLock.__slots__ is empty);
# AsyncWithStatement, a Python class, comes after LockBase among its bases (an extension type's
# first base must be one).

cimport cython
from hiredlock._core.lock_steps cimport LockBase, acquire_deadline


cdef class AsyncLock(LockBase):
    pass


@cython.locals(lock=AsyncLock)
cpdef AsyncLock new_async_lock(client, name, ttl)
