"""The local gate of a lock object shared by the threads of a process.

A Lock (or RLock) object is held by one thread of the process at a time, as a threading.Lock is:
a thread whose acquire() finds the object held by another waits here for its release (within its
deadline), with no network traffic, before it tries the masters. hiredlock.aio's TaskGate is the
same for the tasks of an event loop.
"""

from __future__ import annotations

import threading
import time
from typing import Optional

_get_ident = threading.get_ident


class ThreadGate:
    """Held by one thread at a time; any thread may leave it (as threading.Lock's release)."""

    __slots__ = ("_lock", "owner")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.owner: Optional[int] = None  # the thread that entered last, while held

    def try_enter(self) -> bool:
        if self._lock.acquire(False):
            self.owner = _get_ident()
            return True
        return False

    def mine(self) -> bool:
        """Whether the calling thread holds the gate."""
        return self.owner == _get_ident()

    def enter(self, deadline_ns: Optional[int]) -> bool:
        """Waits for the gate until the deadline (monotonic ns; None: for ever); False when it
        stayed held."""
        if deadline_ns is None:
            entered = self._lock.acquire()
        else:
            entered = self._lock.acquire(True, max(0.0, (deadline_ns - time.monotonic_ns()) / 1e9))
        if entered:
            self.owner = _get_ident()
        return entered

    def leave(self) -> None:
        self.owner = None
        self._lock.release()
