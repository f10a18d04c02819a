"""Kept for old imports (`from hiredlock.lock import ...`): import from hiredlock instead.
Importing this module warns (DeprecationWarning)."""

from ._lock import Lock, WithStatement, new_token
from ._moved import warn_moved

__all__ = ["Lock", "WithStatement", "new_token"]

warn_moved(__name__, ["Lock"])
