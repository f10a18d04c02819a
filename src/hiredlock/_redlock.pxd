# Redlock's module compiled (see hiredlock/_compiled.py): lock()'s usual call makes its Lock with
# a C call (_lock.pxd's new_lock), once per lock object.

from hiredlock._lock cimport new_lock
