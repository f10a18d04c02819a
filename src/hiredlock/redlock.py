"""Kept for old imports (`from hiredlock.redlock import ...`): import from hiredlock instead.
Importing this module warns (DeprecationWarning)."""

from ._moved import warn_moved
from ._redlock import KeyState, Redlock, Removed

__all__ = ["KeyState", "Redlock", "Removed"]

warn_moved(__name__, __all__)
