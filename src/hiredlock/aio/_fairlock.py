"""AsyncFairLock: FairLock for asyncio (see hiredlock._core.fairlocks)."""

from __future__ import annotations

from .._core.fairlocks import FairBase
from ._lock import AsyncLock


class AsyncFairLock(FairBase, AsyncLock):
    """An AsyncLock made by AsyncRedlock.lock(name, ttl, fair=True): waiters get it in the order
    they asked for it."""

    __slots__ = ()
