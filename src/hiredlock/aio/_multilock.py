"""AsyncMultiLock: the MultiLock of hiredlock.aio (see _core/multilocks.py)."""

from __future__ import annotations

from .._core.multilocks import MultiLockBase
from ._lock import AsyncLock


class AsyncMultiLock(MultiLockBase, AsyncLock):
    """As MultiLock, for asyncio, with AsyncLock's API (`await acquire()`, `async with`, ...).
    Made by AsyncRedlock.multilock()."""

    __slots__ = ()
    _kind = "AsyncMultiLock"
