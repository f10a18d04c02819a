"""Kept for old imports (`from hiredlock.multilock import ...`): import from hiredlock instead.
Importing this module warns (DeprecationWarning)."""

from ._moved import warn_moved
from ._multilock import MultiLock

__all__ = ["MultiLock"]

warn_moved(__name__, __all__)
