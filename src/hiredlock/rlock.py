"""RLock: a reentrant lock. The owning thread may acquire it again; the last release unlocks."""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any, Optional

from ._core import fork as _fork
from ._core import validation as _validation
from ._core.errors import NotHeld
from ._core.validation import Duration
from .lock import Lock, WithStatement

if TYPE_CHECKING:
    from .redlock import Redlock


class RLock(WithStatement):
    """Like threading.RLock, across machines. Made by Redlock.rlock(); shared by threads.

    Inside one process, a thread that does not own it waits on a local gate first (no network
    traffic while a sibling thread holds it), then takes the distributed lock with its own Lock.
    """

    def __init__(self, redlock: Redlock, name: str | bytes, ttl: Duration, **options: Any) -> None:
        self._make_lock = lambda: Lock(redlock, name, ttl, **options)
        self._make_lock()  # checks the arguments now, before any I/O
        self._name = name
        self._blocking_timeout = options.get("blocking_timeout")
        self._gate = threading.Lock()  # held while some thread of this process owns the lock
        self._owner: Optional[int] = None
        self._count = 0
        self._lock: Optional[Lock] = None
        self._last_votes: tuple = ()
        self._generation = _fork.generation

    def _held_by_parent(self) -> bool:
        """True in a forked child for an RLock its parent owned at the fork (forgotten here)."""
        if self._generation == _fork.generation:
            return False
        owned = self._owner is not None
        self._this_process()
        return owned

    def _this_process(self) -> None:
        """In a forked child the parent's ownership is void, and the gate (which a parent thread
        may have held at the fork) is replaced."""
        if self._generation != _fork.generation:
            self._gate = threading.Lock()
            self._owner = None
            self._count = 0
            self._lock = None
            self._generation = _fork.generation

    @property
    def name(self) -> str | bytes:
        return self._name

    @property
    def lock(self) -> Optional[Lock]:
        """The Lock that holds the masters while owned (its token, fence, validity, lost event)."""
        return self._lock

    @property
    def held(self) -> bool:
        lock = self._lock
        return lock is not None and lock.held

    @property
    def count(self) -> int:
        """How many times the owning thread acquired it (0 when not owned)."""
        return self._count if self._generation == _fork.generation else 0

    def acquire(self, blocking: bool = True, timeout: Optional[Duration] = None) -> bool:
        """As Lock.acquire (blocking_timeout bounds it when timeout is None); returns True at once
        (counting) when this thread owns it already."""
        _validation.flag(blocking, "blocking")
        self._this_process()
        me = threading.get_ident()
        if self._owner == me:
            self._count += 1
            return True
        if timeout is not None and not blocking:
            raise ValueError("timeout cannot be given with blocking=False")
        if timeout is None and blocking:
            timeout = self._blocking_timeout
        wait_s = None if timeout is None else _validation.non_negative_seconds(timeout, "timeout")
        start = time.monotonic()
        if not self._gate.acquire(blocking, -1 if wait_s is None else wait_s):
            return False
        try:
            lock = self._make_lock()
            remaining = None if wait_s is None else max(0.0, wait_s - (time.monotonic() - start))
            acquired = lock.acquire(blocking, remaining) if blocking else lock.acquire(False)
        except BaseException:
            self._gate.release()
            raise
        if not acquired:
            self._gate.release()
            self._last_votes = lock.last_votes
            return False
        self._lock = lock
        self._owner = me
        self._count = 1
        return True

    def release(self) -> None:
        """Counts down; the owner's last release unlocks the masters (LockLost as Lock.release)."""
        self._this_process()
        if self._owner != threading.get_ident():
            raise NotHeld(f"lock {self._name!r} is not held by this thread")
        self._count -= 1
        if self._count:
            return
        lock, self._lock, self._owner = self._lock, None, None
        try:
            assert lock is not None
            lock.release()
        finally:
            self._gate.release()

    def extend(self, ttl: Optional[Duration] = None) -> None:
        self._this_process()
        if self._owner != threading.get_ident() or self._lock is None:
            raise NotHeld(f"lock {self._name!r} is not held by this thread")
        self._lock.extend(ttl)

    def __repr__(self) -> str:
        return f"<hiredlock.RLock {self._name!r} count={self._count}>"
