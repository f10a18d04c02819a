"""The local gate of a lock object shared by the threads of a process.

A Lock (or RLock) object is held by one thread of the process at a time, as a threading.Lock is:
a thread whose acquire() finds the object held by another waits here for its release (within its
deadline), with no network traffic, before it tries the masters. hiredlock.aio's TaskGate is the
same for the tasks of an event loop.

The holder is one attribute, set and cleared under the gate's own mutex, so that an interrupt (a
signal handler's exception) anywhere leaves the gate either held by the caller, which can see
that and let it go, or free: never held by nobody.
"""

from __future__ import annotations

import threading
import time
from typing import Optional

_get_ident = threading.get_ident


class ThreadGate:
    """Held by one thread at a time; any thread may leave it (as threading.Lock's release)."""

    __slots__ = ("_free", "owner")

    def __init__(self) -> None:
        self._free = threading.Condition(threading.Lock())
        self.owner: Optional[int] = None  # the thread that holds it

    @property
    def held(self) -> bool:
        return self.owner is not None

    def mine(self) -> bool:
        """Whether the calling thread holds the gate."""
        return self.owner == _get_ident()

    def try_enter(self) -> bool:
        with self._free:
            if self.owner is None:
                self.owner = _get_ident()
                return True
        return False

    def enter(self, deadline_ns: Optional[int]) -> bool:
        """Waits for the gate until the deadline (monotonic ns; None: for ever); False when it
        stayed held."""
        free = self._free
        with free:
            try:
                while self.owner is not None:
                    if deadline_ns is None:
                        free.wait()
                        continue
                    remaining = (deadline_ns - time.monotonic_ns()) / 1e9
                    if remaining <= 0:
                        return False
                    free.wait(remaining)
            except BaseException:
                free.notify()  # (woken and interrupted: the next waiter gets the wake-up)
                raise
            self.owner = _get_ident()
            return True

    def leave(self) -> None:
        with self._free:
            self.owner = None
            self._free.notify()
