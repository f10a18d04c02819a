"""AsyncRWLock: RWLock for asyncio (see hiredlock._core.rwlocks for the rules)."""

from __future__ import annotations

from .._core.rwlocks import ReaderBase, RWLockBase, WriterBase
from ._lock import AsyncLock


class AsyncReadLock(ReaderBase, AsyncLock):
    """One reader of an AsyncRWLock, with the AsyncLock API."""

    __slots__ = ()


class AsyncWriteLock(WriterBase, AsyncLock):
    """The writer of an AsyncRWLock, with the AsyncLock API."""

    __slots__ = ()


class AsyncRWLock(RWLockBase[AsyncReadLock, AsyncWriteLock]):
    """A read-write lock made by AsyncRedlock.rwlock(): read() and write() make a new lock
    object for one holder each (`async with rw.read():`, `async with rw.write():`)."""

    _read_class = AsyncReadLock
    _write_class = AsyncWriteLock

    def read(self) -> AsyncReadLock:
        return self._make_read()

    def write(self) -> AsyncWriteLock:
        return self._make_write()
