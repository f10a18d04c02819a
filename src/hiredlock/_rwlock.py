"""RWLock: many readers or one writer of a name (see _core/rwlocks.py for the rules and why they
hold); its read and write locks have the Lock API."""

from __future__ import annotations

from ._core.rwlocks import ReaderBase, RWLockBase, WriterBase
from ._lock import Lock

__all__ = ["RWLock", "ReadLock", "WriteLock"]


class ReadLock(ReaderBase, Lock):
    """One reader of an RWLock, with the Lock API (acquire, release, extend, validity, `with`,
    auto_renew); other readers may hold the name at the same time, a writer may not."""

    __slots__ = ()


class WriteLock(WriterBase, Lock):
    """The writer of an RWLock, with the Lock API: no reader and no other writer holds the name
    while it does."""

    __slots__ = ()


class RWLock(RWLockBase[ReadLock, WriteLock]):
    """A read-write lock made by Redlock.rwlock(): read() and write() make a new lock object
    for one holder each (`with rw.read():`, `with rw.write():`)."""

    _read_class = ReadLock
    _write_class = WriteLock

    def read(self) -> ReadLock:
        return self._make_read()

    def write(self) -> WriteLock:
        return self._make_write()
