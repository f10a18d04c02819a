"""The local gate of a lock object shared by the threads of a process.

A Lock object is held by one thread of the process at a time, as a threading.Lock is: a thread
whose acquire() finds the object held by another waits here for its release (within its
deadline), with no network traffic, before it tries the masters. hiredlock.aio's TaskGate is the
same for the tasks of an event loop.

A signal handler's exception (Ctrl-C) may come between any two calls of Python code, so every
change of the gate's state is one assignment of its holder, under its state mutex (see
_core/state_mutex.py: a C mutex once compiled, which a `with` statement gives back whatever
happens). An interrupt therefore leaves the gate held by the caller (which sees that with mine()
and lets it go) or free, never held by nobody. The wake-up of waiters is a hint (a lock released
as a token): a waiter that misses one looks again within WAIT_SLICE_S.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Optional

from .._core.local_gate import LocalGate
from .._core.state_mutex import StateMutex

try:
    import cython  # type: ignore[import-untyped]
except ImportError:  # uncompiled, without Cython installed: only `compiled` is read
    from types import SimpleNamespace

    cython = SimpleNamespace(compiled=False)

_get_ident = threading.get_ident


def _me() -> int:
    """The calling thread's ident (threading.get_ident's: never 0). Compiled, read in C (gate.pxd's
    thread_ident) into a C integer, where get_ident would be a Python call and an int object."""
    if cython.compiled:
        me: int = thread_ident()  # type: ignore[name-defined]  # noqa: F821
    else:
        me = _get_ident()
    return me


# A waiter looks at the gate again at least this often, however it was (not) woken.
WAIT_SLICE_S = 0.05


class ThreadGate(LocalGate):
    """Held by one thread at a time; any thread may leave it (as threading.Lock's release)."""

    __slots__ = ("_holder", "_mutex", "_waiters", "_wake")

    def __init__(self, mutex: Optional[StateMutex] = None) -> None:
        self._init(StateMutex() if mutex is None else mutex)

    def _init(self, mutex: StateMutex) -> None:
        # (a lock object's gate shares its state's mutex: see LockState._new_gate)
        self._mutex = mutex
        self._holder = 0  # the holding thread's ident (0: free)
        # Made by the first waiter (most gates never have one: a lock object made per use):
        # the waiting threads' idents, and a lock released (a token) when the gate is left with
        # waiters
        self._waiters: Optional[set[int]] = None
        self._wake: Optional[threading.Lock] = None

    def is_held(self) -> bool:
        return self._holder != 0

    @property
    def waiting(self) -> bool:
        """Whether some thread waits for the gate."""
        return bool(self._waiters)

    def mine(self) -> bool:
        """Whether the calling thread holds the gate."""
        return self._holder == _me()

    def try_enter(self) -> bool:
        """Takes the gate if it is free (False when held, by this thread too)."""
        me = _me()
        with self._mutex.lock:
            if self._holder != 0:
                return False
            self._holder = me
        return True

    def _take(self, me: int) -> bool:
        """Takes the gate for `me` if it is free; whether `me` holds it."""
        with self._mutex.lock:
            if self._holder == 0:
                self._holder = me
            return self._holder == me

    def enter(self, deadline_ns: Optional[int]) -> bool:
        """Waits for the gate until the deadline (monotonic ns; None: for ever); False when it
        stayed held."""
        me = _me()
        waiters, wake = self._waiting_room()
        waiters.add(me)
        try:
            while not self._take(me):
                if deadline_ns is None:
                    wait = WAIT_SLICE_S
                else:
                    wait = min(WAIT_SLICE_S, (deadline_ns - time.monotonic_ns()) / 1e9)
                    if wait <= 0:
                        return False
                wake.acquire(True, wait)
            return True
        finally:
            waiters.discard(me)

    def _waiting_room(self) -> tuple[set[int], threading.Lock]:
        """The waiters' set and wake-up lock, made by the first waiter (installed together, under
        the mutex, before any thread is counted as waiting: leave() finds both)."""
        if self._wake is None:
            waiters: set[int] = set()
            wake = threading.Lock()
            wake.acquire()
            with self._mutex.lock:
                if self._wake is None:
                    self._waiters = waiters
                    self._wake = wake
        assert self._waiters is not None and self._wake is not None
        return self._waiters, self._wake

    def leave_under_mutex(self) -> bool:
        # (the caller holds self._mutex: the lock's state mutex)
        if self._waiters:
            return True
        self._holder = 0
        return False

    def leave(self) -> None:
        with self._mutex.lock:
            self._holder = 0
        if self._waiters and self._wake is not None:
            with contextlib.suppress(RuntimeError):  # (a token is there already)
                self._wake.release()


def gate_on(mutex: StateMutex) -> ThreadGate:
    """A free gate whose changes go under `mutex` (a lock object's: see LockState._new_gate).
    Compiled, made by the type's allocation in C: ThreadGate(mutex) goes through the type's call
    with an argument tuple, about 500 instructions more, once per lock object."""
    gate: ThreadGate = ThreadGate.__new__(ThreadGate)
    gate._init(mutex)
    return gate
