# AsyncRedlock's module compiled (see hiredlock/_compiled.py): lock()'s usual call makes its
# AsyncLock with a C call (aio/_lock.pxd's new_async_lock), once per lock object.

from hiredlock.aio._lock cimport new_async_lock
