"""FairLock: a Lock whose waiters get it in the order they asked (see _core/fairlocks.py)."""

from __future__ import annotations

from ._core.fairlocks import FairBase
from ._lock import Lock

__all__ = ["FairLock"]


class FairLock(FairBase, Lock):
    """A Lock made by Redlock.lock(name, ttl, fair=True): blocking acquires are granted in the
    order they were made (see docs/kinds/fairlock.md for what that order is)."""

    __slots__ = ()
