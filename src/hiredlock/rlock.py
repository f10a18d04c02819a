"""Kept for old imports (`from hiredlock.rlock import ...`): import from hiredlock instead.
Importing this module warns (DeprecationWarning)."""

from ._moved import warn_moved
from ._rlock import RLock

__all__ = ["RLock"]

warn_moved(__name__, __all__)
