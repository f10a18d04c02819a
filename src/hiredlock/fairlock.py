"""Kept for old imports (`from hiredlock.fairlock import ...`): import from hiredlock instead.
Importing this module warns (DeprecationWarning)."""

from ._fairlock import FairLock
from ._moved import warn_moved

__all__ = ["FairLock"]

warn_moved(__name__, __all__)
