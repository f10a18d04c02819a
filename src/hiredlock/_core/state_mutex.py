"""The mutex of a client's state and of its lock objects' states: a client's `closed` with the
locks it holds (see session.py), and each of its lock objects' state (its owner's acquire and
release, the watchdog's renewals, extend and check: see lock_state.py) with its local gate. One
mutex per client, not one per lock object: a lock's acquire changes the client's state and its
own together (one take of the mutex, where two mutexes took two), and a lock object made per
use makes no mutex. What runs under it is a few reads and writes of fields, so threads working
on different locks of one client hold it for a moment each.

Compiled (state_mutex.pxd), `lock` is a C mutex in the object (Cython's pymutex: PyMutex on
Python 3.13+, a PyThread lock before), and `with mutex.lock:` takes and gives it with no Python
call: a try-acquire first, and when another thread holds it, a wait with the GIL released.
Uncompiled, it is a threading.Lock. Either way a forked child makes a new StateMutex for every
client it uses, and its lock objects take the new one (Session.this_process,
LockState._this_process), so a mutex held by a thread of the parent at the fork is never waited
for.

What runs while it is held is kept to reads and writes of fields (no Python code: what needs
some, such as making a lock's `lost` Event, is done before), so that compiled, the holder does
not let the GIL go before it gives the mutex back, and the mutex is rarely found held; when it
is, the caller waits with the GIL released, as for a threading.Lock.
"""

from __future__ import annotations

import threading

try:
    import cython  # type: ignore[import-untyped]
except ImportError:  # uncompiled, without Cython installed: only `compiled` is read
    from types import SimpleNamespace

    cython = SimpleNamespace(compiled=False)


class StateMutex:
    """A mutex for one process: `with mutex.lock:`."""

    __slots__ = ("lock",)

    def __init__(self) -> None:
        if not cython.compiled:  # (compiled, `lock` is the C mutex of state_mutex.pxd)
            self.lock = threading.Lock()
