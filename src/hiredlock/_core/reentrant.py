"""The reentrancy of RLock and hiredlock.aio.AsyncRLock, written once.

The owner (a thread, or a task: _current() says which) may acquire again, counting; its last
release lets go of the Lock that holds the masters. Inside one process, a caller that does not own
it waits on a local gate first (a ThreadGate or a TaskGate: _new_gate()), with no network traffic
while a sibling holds it, then takes the distributed lock with a Lock of its own. The API classes
add only the waits (blocking, or awaited) around these steps.
"""

from __future__ import annotations

from typing import Any, Callable, Generic, Optional, TypeVar

from . import clock as _clock
from . import validation as _validation
from .errors import NotHeld, Vote
from .fork import generation as _fork_generation
from .lock_state import LockState
from .observe import LockStats
from .validation import Duration

_L = TypeVar("_L", bound=LockState)  # the API's lock class: Lock, or AsyncLock


class ReentrantBase(Generic[_L]):
    """The state and bookkeeping of a reentrant lock; see RLock and AsyncRLock for the API."""

    _owner_kind = "thread"  # what owns it, in messages ("task" for asyncio)

    def __init__(self, make_lock: Callable[[], _L], name: str | bytes) -> None:
        def make() -> _L:
            lock = make_lock()
            lock._told_kind = "RLock"  # (its events are the RLock's)
            return lock

        self._make_lock = make
        # (the first lock made checks the options now, before any I/O, and says the
        # blocking_timeout they give)
        self._blocking_timeout = make_lock().blocking_timeout
        self._name = name
        self._gate = self._new_gate()  # held while some thread or task of this process owns it
        self._owner: Any = None
        self._count = 0
        self._lock: Optional[_L] = None
        self._last_lock: Optional[_L] = None  # the Lock of the last ownership (for `stats`)
        self._last_votes: tuple[Vote, ...] = ()
        self._generation = _fork_generation[0]

    # -- what the API classes provide ------------------------------------------------------------

    def _new_gate(self) -> Any:
        """The local gate: a ThreadGate or a TaskGate."""
        raise NotImplementedError

    @staticmethod
    def _current() -> Any:
        """The caller, as an owner: the thread's ident, or the current task."""
        raise NotImplementedError

    # -- state ---------------------------------------------------------------------------------

    @property
    def name(self) -> str | bytes:
        return self._name

    @property
    def lock(self) -> Optional[_L]:
        """The lock that holds the masters while owned (its token, fence, validity, lost event)."""
        return self._lock

    @property
    def held(self) -> bool:
        lock = self._lock
        return lock is not None and bool(lock.held)

    @property
    def count(self) -> int:
        """How many times the owner acquired it (0 when not owned)."""
        return self._count if self._generation == _fork_generation[0] else 0

    @property
    def last_votes(self) -> tuple[Vote, ...]:
        return self._last_votes

    @property
    def stats(self) -> LockStats:
        """The stats (see LockStats) of the Lock of the current ownership, or of the last one."""
        lock = self._lock or self._last_lock
        return LockStats() if lock is None else lock.stats

    # -- fork ----------------------------------------------------------------------------------

    def _held_by_parent(self) -> bool:
        """True in a forked child for a lock its parent owned at the fork (forgotten here)."""
        if self._generation == _fork_generation[0]:
            return False
        owned = self._owner is not None
        self._this_process()
        return owned

    def _this_process(self) -> None:
        """In a forked child the parent's ownership is void, and the gate (which a parent thread
        may have held at the fork) is replaced."""
        if self._generation != _fork_generation[0]:
            self._gate = self._new_gate()
            self._owner = None
            self._count = 0
            self._lock = None
            self._generation = _fork_generation[0]

    # -- the steps around the waits --------------------------------------------------------------

    def _reentered(self, blocking: Any) -> bool:
        """acquire()'s first step: True (counted) when the caller owns the lock already."""
        _validation.flag(blocking, "blocking")
        self._this_process()
        me = self._current()
        if me is not None and self._owner == me:
            self._count += 1
            return True
        return False

    def _deadline_ns(self, blocking: bool, timeout: Optional[Duration]) -> Optional[int]:
        """acquire()'s deadline on the monotonic clock (the lock's blocking_timeout when timeout
        is None); None: none."""
        if timeout is not None and not blocking:
            raise ValueError("timeout cannot be given with blocking=False")
        if timeout is None and blocking:
            timeout = self._blocking_timeout
        if timeout is None:
            return None
        wait_s = _validation.non_negative_seconds(timeout, "timeout")
        return _clock.monotonic_ns() + int(wait_s * 1e9)

    @staticmethod
    def _remaining(deadline_ns: Optional[int]) -> Optional[float]:
        """Seconds left until the deadline (the gate's wait is spent): the Lock's timeout."""
        if deadline_ns is None:
            return None
        return max(0.0, (deadline_ns - _clock.monotonic_ns()) / 1e9)

    def _taken(self, lock: _L, acquired: bool) -> bool:
        """After the Lock's acquire (the gate is ours): owned, or the gate goes to the next."""
        if not acquired:
            self._gate.leave()
            self._last_votes = lock.last_votes
            return False
        self._lock = self._last_lock = lock
        self._owner = self._current()
        self._count = 1
        return True

    def _counted_down(self) -> Optional[_L]:
        """release()'s bookkeeping: the Lock to release (then the gate) at the owner's last
        release, else None; NotHeld when the caller is not the owner."""
        self._owned()
        self._count -= 1
        if self._count:
            return None
        lock, self._lock, self._owner = self._lock, None, None
        return lock

    def _owned(self) -> _L:
        """The Lock, when the caller owns it; NotHeld otherwise."""
        self._this_process()
        owner, lock = self._owner, self._lock
        if owner is None or owner != self._current() or lock is None:
            raise NotHeld(f"lock {self._name!r} is not held by this {self._owner_kind}")
        return lock

    _repr_name = "RLock"

    def __repr__(self) -> str:
        return f"<hiredlock.{self._repr_name} {self._name!r} count={self._count}>"
