"""Kept for old imports (`from hiredlock.semaphore import ...`): import from hiredlock instead.
Importing this module warns (DeprecationWarning)."""

from ._moved import warn_moved
from ._semaphore import Permit, Semaphore

__all__ = ["Permit", "Semaphore"]

warn_moved(__name__, __all__)
