"""RLock: a reentrant lock. The owning thread may acquire it again; the last release unlocks (the
reentrancy is _core/reentrant.py's, shared with hiredlock.aio.AsyncRLock)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Optional

from ._core.compat import Unpack
from ._core.options import LockOptions
from ._core.reentrant import ReentrantBase
from ._core.validation import Duration
from ._lock import Lock, WithStatement
from ._sync.gate import ThreadGate

if TYPE_CHECKING:
    from ._redlock import Redlock


class RLock(WithStatement, ReentrantBase[Lock]):
    """Like threading.RLock, across machines. Made by Redlock.rlock(); shared by threads.

    Inside one process, a thread that does not own it waits on a local gate first (no network
    traffic while a sibling thread holds it), then takes the distributed lock with its own Lock.
    """

    def __init__(
        self,
        redlock: Redlock,
        name: str | bytes,
        ttl: Duration,
        **options: Unpack[LockOptions[Lock]],
    ) -> None:
        ReentrantBase.__init__(self, lambda: Lock(redlock, name, ttl, **options), name)

    def _new_gate(self) -> ThreadGate:
        return ThreadGate()

    _current = staticmethod(threading.get_ident)

    def acquire(self, blocking: bool = True, timeout: Optional[Duration] = None) -> bool:
        """As Lock.acquire (blocking_timeout bounds it when timeout is None); returns True at once
        (counting) when this thread owns it already."""
        if self._reentered(blocking):
            return True
        deadline_ns = self._deadline_ns(blocking, timeout)
        gate = self._gate
        if not gate.try_enter() and not (blocking and gate.enter(deadline_ns)):
            return False
        try:
            lock = self._make_lock()
            remaining = self._remaining(deadline_ns)
            acquired = lock.acquire(True, remaining) if blocking else lock.acquire(False)
        except BaseException:
            gate.leave()
            raise
        return self._taken(lock, acquired)

    def release(self) -> None:
        """Counts down; the owner's last release unlocks the masters (LockLost as Lock.release)."""
        lock = self._counted_down()
        if lock is None:
            return
        try:
            lock.release()
        finally:
            self._gate.leave()

    def extend(self, ttl: Optional[Duration] = None) -> None:
        self._owned().extend(ttl)
