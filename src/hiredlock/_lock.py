"""Lock: one named lock on a Redlock's masters, driven by the calling thread (see
_core/lock_steps.py and _core/lock_state.py for the algorithm it shares with
hiredlock.aio.AsyncLock; its acquire and release run the direct form of those steps,
_sync/blocking_steps.py, where its kind keeps LockBase's)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Optional

from ._core import clock as _clock
from ._core.compat import Self
from ._core.errors import HiredlockError, LockLost, LockNotAcquired, NotHeld, Vote
from ._core.fork import generation as _fork_generation
from ._core.lock_steps import LockBase, acquire_deadline
from ._core.state_mutex import StateMutex
from ._core.tokens import new_token
from ._core.validation import Duration
from ._core.with_blocks import release_failed_on_exit
from ._sync.blocking_steps import (
    acquire_steps_direct,
    direct_acquire,
    direct_release,
    release_steps_direct,
)
from ._sync.gate import ThreadGate, gate_on

__all__ = ["Lock", "WithStatement", "new_lock", "new_token"]


class WithStatement:
    """`with lock:` for Lock and RLock: acquire within the lock's blocking_timeout or raise
    LockNotAcquired (the body never runs unlocked); release on exit. When the body raised, its
    exception wins and a failed release is only logged beside it."""

    __slots__ = ()
    _blocking_timeout: Optional[float]
    _generation: int
    _last_votes: tuple[Vote, ...]
    _name: str | bytes

    if TYPE_CHECKING:  # what the lock classes this serves define

        def acquire(self, blocking: bool = True, timeout: Optional[Duration] = None) -> bool: ...

        def release(self) -> None: ...

        def _held_by_parent(self) -> bool: ...

    def __enter__(self) -> Self:
        if not self.acquire(timeout=self._blocking_timeout):
            raise LockNotAcquired(f"lock {self._name!r} was not acquired", self._last_votes)
        return self

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        # (no call before release() unless forked: each call is a point where CPython may run a
        # signal handler, and an interrupt there would skip the release)
        if self._generation != _fork_generation[0] and self._held_by_parent():
            return  # forked inside the block: the lock is the parent's, the child sends nothing
        try:
            self.release()
        except HiredlockError as error:
            release_failed_on_exit(self._name, exc_type, error)


class Lock(LockBase, WithStatement):
    """A Redlock lock on one name. Made by Redlock.lock(); held by one thread at a time.

    The watchdog (auto_renew) and the owner may touch it concurrently; a private mutex orders
    their state changes, and a renewal that crosses a release never revives the lock.
    """

    __slots__ = ()

    @property
    def lost(self) -> threading.Event:
        """Set when the lock is found lost while held (a failed renewal or extend)."""
        event: threading.Event = super().lost
        return event

    def acquire(self, blocking: bool = True, timeout: Optional[Duration] = None) -> bool:
        """Acquires the lock; True once held by a valid quorum.

        blocking=False tries once (the lock's blocking_timeout does not apply, and a timeout
        raises ValueError, as threading.Lock's does). blocking=True retries, after a random delay
        around the Redlock's retry_delay, while the lock is held by others: until `timeout`
        seconds have passed (an overall deadline on the monotonic clock), or the lock's
        blocking_timeout when timeout is None, or for ever when both are None. Returns False when
        the lock stayed taken. Raises QuorumUnreachable when too few masters answered, after
        retry_count attempts in a row (at once when blocking=False), MasterConfigError at once
        when too many masters refused us for a wrong password or missing permissions, and
        AlreadyAcquired when this Lock object holds the lock already. A lock that expired or was
        lost can be acquired again.

        A Lock object shared by the threads of a process is held by one of them at a time, as a
        threading.Lock is: another thread's acquire() waits for its release (within the same
        deadline), or returns False at once with blocking=False.
        """
        deadline_ns = acquire_deadline(blocking, timeout, self._blocking_timeout)
        before = self._acquisition
        turn = None
        try:
            entered = self._try_gate()
            if entered is False and not (blocking and self._gate.enter(deadline_ns)):
                return False  # another thread of this process held the lock object throughout
            if entered is not None:
                # The object was free: its last holder's release may still be under way on
                # another thread, and that round must not choose where this acquisition's
                # rounds go (see LockState._pin).
                self._pin = [None]
            turn = self._turn_gate(blocking, entered)
            if turn is not None and not turn.try_enter():
                waited_from = _clock.monotonic_ns()
                if not turn.enter(deadline_ns):  # other waiters' turns until the deadline
                    self._end_turn(turn)
                    self._turn_missed(waited_from)
                    return False
            if direct_acquire(type(self)):  # (the steps' rounds run as they come)
                acquired: bool = acquire_steps_direct(self, blocking, deadline_ns, turn)
            else:
                steps = self._acquire_steps(blocking, deadline_ns, turn)
                acquired = self._rounds.run(steps, self._pin)
            if turn is not None:
                # (in here: an interrupt as the turn ends gives the lock back, below)
                self._end_turn(turn)
        except BaseException:
            # An interrupt that came once the steps were over (the signal handler runs when the
            # driver, a call into C, returns here): the lock they took is given back.
            token = self._token
            if token is not None and self._acquisition != before and self._unlocked_token != token:
                self._rounds.run(self._unlock_steps(token), self._pin)
            if turn is not None:
                self._end_turn(turn)
            self._leave_gate_unless_held()
            raise
        if not acquired:
            self._leave_gate_unless_held()
        return acquired

    def release(self) -> None:
        """Unlocks every master. Raises LockLost if fewer than a quorum still held our token.

        An interrupt (Ctrl-C) in the middle still sends the unlock before it propagates. In a
        forked child, a lock its parent held is not held (NotHeld), and nothing is sent.
        """
        token = self._token
        try:
            if direct_release(type(self)):
                release_steps_direct(self)
            else:
                self._rounds.run(self._release_steps(), self._pin)
        except (NotHeld, LockLost):
            raise
        except BaseException:
            # An interrupt that came before the steps could catch it (between two of their
            # instructions outside a round): the unlock still goes out, once.
            if token is not None and self._unlocked_token != token:
                self._rounds.run(self._unlock_steps(token), self._pin)
            raise

    def extend(self, ttl: Optional[Duration] = None) -> None:
        """Re-arms the lock for `ttl` seconds (default: its own ttl) from now, on every master.

        Counts only if a quorum extended and the new validity, measured from this call's start, is
        positive; otherwise the lock is marked lost and LockLost is raised. A key that has expired
        is never created again. With max_extensions, the extension past the cap raises
        TooManyExtensions (before any I/O).
        """
        timing = self._extend_timing(ttl)
        self._rounds.run(self._extend_steps(timing), self._pin)

    def check(self) -> float:
        """Asks every master how long our key lives still, and returns the validity that proves
        (seconds; `held` and `validity` follow it), without re-arming the lock. Raises LockLost
        (and sets `lost`) when fewer than a quorum hold our token, NotHeld when this object holds
        none. The way to learn the validity of an adopted lock (lock(..., token=)) before
        extending it."""
        validity: float = self._rounds.run(self._check_steps(), self._pin)
        return validity

    # -- what LockBase asks of a blocking lock ------------------------------------------------

    def _new_lost_event(self) -> threading.Event:
        return threading.Event()

    def _new_gate(self, mutex: Optional[StateMutex] = None) -> ThreadGate:
        return ThreadGate() if mutex is None else gate_on(mutex)

    def _current_owner(self) -> threading.Thread:
        return threading.current_thread()

    @staticmethod
    def _owner_ended(owner: threading.Thread) -> bool:
        return not owner.is_alive()

    def _start_renewal(self, acquisition: int, due_ns: int) -> bool:
        watching: bool = self._session.renewals.watchdog().watch(self._renew, acquisition, due_ns)
        return watching

    def _call_on_lost_soon(self) -> None:
        # on the watchdog's callbacks thread: a slow on_lost delays no renewal
        self._session.renewals.watchdog().call_soon(self._call_on_lost)

    def _renew(self, acquisition: int) -> Optional[int]:
        """One renewal of `acquisition` (the watchdog calls it); when to renew next, or None."""
        due_ns: Optional[int] = self._rounds.run(self._renew_steps(acquisition), self._pin)
        return due_ns


def new_lock(client: Any, name: str | bytes, ttl: Duration) -> Lock:
    """Lock(client, name, ttl), Redlock.lock's usual call. Compiled, the object is allocated in C
    and set up by LockState._setup (what its __init__ does) with no argument tuple and no
    parsing of keywords: about 500 instructions less, once per lock object. (Lock keeps
    LockState's __init__: tests/api/test_lock_lifecycle.py checks it.)"""
    lock: Lock = Lock.__new__(Lock)
    lock._setup(client, name, ttl)
    return lock
