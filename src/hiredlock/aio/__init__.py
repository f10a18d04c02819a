"""hiredlock for asyncio: the same Redlock locks, on the event loop, with no thread.

from hiredlock.aio import AsyncRedlock
async with AsyncRedlock(["redis://127.0.0.1:6379/0", ...]) as redlock:
    async with redlock.lock("report:2026-11", ttl=30):
        ...
"""

from .._core.batches import KeyState, Removed
from ._fairlock import AsyncFairLock
from ._lock import AsyncLock, AsyncRLock
from ._multilock import AsyncMultiLock
from ._redlock import AsyncRedlock
from ._rwlock import AsyncReadLock, AsyncRWLock, AsyncWriteLock
from ._semaphore import AsyncPermit, AsyncSemaphore

__all__ = [
    "AsyncFairLock",
    "AsyncLock",
    "AsyncMultiLock",
    "AsyncPermit",
    "AsyncRLock",
    "AsyncRWLock",
    "AsyncReadLock",
    "AsyncRedlock",
    "AsyncSemaphore",
    "AsyncWriteLock",
    "KeyState",
    "Removed",
]
