"""Kept for old imports (`from hiredlock.rwlock import ...`): import from hiredlock instead.
Importing this module warns (DeprecationWarning)."""

from ._moved import warn_moved
from ._rwlock import ReadLock, RWLock, WriteLock

__all__ = ["RWLock", "ReadLock", "WriteLock"]

warn_moved(__name__, __all__)
