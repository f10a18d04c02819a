# Lock as an extension type, when Cython compiles _lock.py (see hiredlock/_compiled.py): a subclass
# of LockBase's (lock_steps.pxd), so that acquire() and release() read the lock's fields and call
# its steps' methods in C. It adds no field (Lock.__slots__ is empty); WithStatement, a Python
# class, comes after LockBase among its bases (an extension type's first base must be one).

from hiredlock._core.lock_steps cimport LockBase, acquire_deadline


cdef class Lock(LockBase):
    pass
