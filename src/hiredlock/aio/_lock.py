"""AsyncLock and AsyncRLock: hiredlock's locks for asyncio (the algorithm is
_core/lock_steps.py's)."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from typing import TYPE_CHECKING, Any, Optional

from .._core import validation as _validation
from .._core.errors import HiredlockError, LockNotAcquired, NotHeld
from .._core.lock_steps import LockBase, acquire_deadline
from .._core.validation import Duration
from ._gate import TaskGate

if TYPE_CHECKING:
    from ._redlock import AsyncRedlock

_log = logging.getLogger("hiredlock")


class AsyncWithStatement:
    """`async with lock:` for AsyncLock and AsyncRLock: acquire within the lock's
    blocking_timeout or raise LockNotAcquired (the body never runs unlocked); release on exit.
    When the body raised, its exception wins and a failed release is only logged beside it."""

    __slots__ = ()
    _blocking_timeout: Optional[float]
    _last_votes: tuple
    _name: str | bytes

    async def __aenter__(self: Any) -> Any:
        if not await self.acquire(timeout=self._blocking_timeout):
            raise LockNotAcquired(f"lock {self._name!r} was not acquired", self._last_votes)
        return self

    async def __aexit__(self: Any, exc_type: Any, exc: Any, traceback: Any) -> None:
        if exc_type is None:
            await self.release()
            return
        try:
            await self.release()
        except HiredlockError as release_error:
            _log.warning("releasing %r after an exception failed: %s", self._name, release_error)


class AsyncLock(AsyncWithStatement, LockBase):
    """A Redlock lock on one name, for asyncio. Made by AsyncRedlock.lock(); held by one task at a
    time. `async with lock:` acquires within blocking_timeout or raises LockNotAcquired (the
    body never runs unlocked), and releases on exit.

    Cancelling acquire() (task.cancel(), asyncio.timeout) never leaves a key behind: the unlock
    goes out (shielded; it waits about 100 ms at most for the replies) before CancelledError
    propagates. A cancelled release() still releases.
    """

    __slots__ = ()
    _kind = "AsyncLock"

    @property
    def lost(self) -> asyncio.Event:
        """Set when the lock is found lost while held (a failed renewal or extend)."""
        return LockBase.lost.fget(self)  # type: ignore[attr-defined]

    async def acquire(self, blocking: bool = True, timeout: Optional[Duration] = None) -> bool:
        """As Lock.acquire: True once held by a valid quorum; False when it stayed taken until
        the deadline (or at once with blocking=False); QuorumUnreachable, MasterConfigError and
        AlreadyAcquired as there. Waits between attempts with asyncio.sleep.

        An AsyncLock shared by tasks is held by one of them at a time, as an asyncio.Lock is:
        another task's acquire() waits for its release (in the order they came, within the same
        deadline), or returns False at once with blocking=False."""
        deadline_ns = acquire_deadline(blocking, timeout, self._blocking_timeout)
        if self._try_gate() is False and not (blocking and await self._gate.enter(deadline_ns)):
            return False  # another task held the lock object throughout
        try:
            acquired = await self._rounds.run(self._acquire_steps(blocking, deadline_ns))
        except BaseException:
            self._leave_gate_unless_held()
            raise
        if not acquired:
            self._leave_gate_unless_held()
        return acquired

    async def release(self) -> None:
        """Unlocks every master. Raises LockLost if fewer than a quorum still held our token."""
        await self._rounds.run(self._release_steps())

    async def extend(self, ttl: Optional[Duration] = None) -> None:
        """As Lock.extend: re-arms the lock for `ttl` seconds (default: its own ttl) from now;
        LockLost (and `lost` set) when a quorum did not extend it in time."""
        timing = self._extend_timing(ttl)
        await self._rounds.run(self._extend_steps(timing))

    # -- what LockBase asks of an asyncio lock --------------------------------------------------

    def _new_lost_event(self) -> asyncio.Event:
        return asyncio.Event()

    def _new_gate(self) -> TaskGate:
        return TaskGate()

    def _current_owner(self) -> Optional[asyncio.Task]:
        return asyncio.current_task()

    @staticmethod
    def _owner_ended(owner: asyncio.Task) -> bool:
        return owner.done()

    def _start_renewal(self, acquisition: int, due_ns: int) -> bool:
        return self._rounds.spawn(self._renewing(acquisition, due_ns))

    async def _renewing(self, acquisition: int, due_ns: Optional[int]) -> None:
        while due_ns is not None:
            await asyncio.sleep(max(0, due_ns - time.monotonic_ns()) / 1e9)
            due_ns = await self._rounds.run(self._renew_steps(acquisition))

    def _after_on_lost(self, outcome: Any) -> None:
        if inspect.isawaitable(outcome):
            self._rounds.spawn(self._awaited_on_lost(outcome))

    async def _awaited_on_lost(self, outcome: Any) -> None:
        try:
            await outcome
        except Exception:
            _log.exception("hiredlock: the on_lost callback of %r raised", self._name)


class AsyncRLock(AsyncWithStatement):
    """A reentrant AsyncLock: the task that owns it may acquire it again; its last release
    unlocks the masters. Other tasks of this process wait on a local asyncio.Lock first (no
    network traffic while a sibling task holds it). Made by AsyncRedlock.rlock()."""

    def __init__(
        self, redlock: AsyncRedlock, name: str | bytes, ttl: Duration, **options: Any
    ) -> None:
        self._make_lock = lambda: AsyncLock(redlock, name, ttl, **options)
        self._make_lock()  # checks the arguments now, before any I/O
        self._name = name
        self._blocking_timeout = options.get("blocking_timeout")
        # The local gate: while some task of this process owns the lock, the others wait for it
        # here, with no network traffic.
        self._gate = TaskGate()
        self._owner: Optional[asyncio.Task] = None
        self._count = 0
        self._lock: Optional[AsyncLock] = None
        self._last_votes: tuple = ()

    @property
    def name(self) -> str | bytes:
        return self._name

    @property
    def lock(self) -> Optional[AsyncLock]:
        """The AsyncLock that holds the masters while owned."""
        return self._lock

    @property
    def held(self) -> bool:
        lock = self._lock
        return lock is not None and lock.held

    @property
    def count(self) -> int:
        """How many times the owning task acquired it (0 when not owned)."""
        return self._count

    @property
    def last_votes(self) -> tuple:
        return self._last_votes

    async def acquire(self, blocking: bool = True, timeout: Optional[Duration] = None) -> bool:
        """As AsyncLock.acquire; True at once (counting) when this task owns it already."""
        _validation.flag(blocking, "blocking")
        me = asyncio.current_task()
        if self._owner is me and me is not None:
            self._count += 1
            return True
        if timeout is not None and not blocking:
            raise ValueError("timeout cannot be given with blocking=False")
        if timeout is None and blocking:
            timeout = self._blocking_timeout
        wait_s = None if timeout is None else _validation.non_negative_seconds(timeout, "timeout")
        start = time.monotonic()
        gate = self._gate
        if not gate.try_enter():
            if not blocking:
                return False
            deadline_ns = None if wait_s is None else time.monotonic_ns() + int(wait_s * 1e9)
            if not await gate.enter(deadline_ns):
                return False
        try:
            lock = self._make_lock()
            remaining = None if wait_s is None else max(0.0, wait_s - (time.monotonic() - start))
            acquired = (
                await lock.acquire(True, remaining) if blocking else await lock.acquire(False)
            )
        except BaseException:
            gate.leave()
            raise
        if not acquired:
            gate.leave()
            self._last_votes = lock.last_votes
            return False
        self._lock = lock
        self._owner = me
        self._count = 1
        return True

    async def release(self) -> None:
        """Counts down; the owner's last release unlocks the masters (LockLost as release)."""
        if self._owner is None or self._owner is not asyncio.current_task():
            raise NotHeld(f"lock {self._name!r} is not held by this task")
        self._count -= 1
        if self._count:
            return
        lock, self._lock, self._owner = self._lock, None, None
        try:
            assert lock is not None
            await lock.release()
        finally:
            self._gate.leave()

    async def extend(self, ttl: Optional[Duration] = None) -> None:
        if self._owner is not asyncio.current_task() or self._lock is None:
            raise NotHeld(f"lock {self._name!r} is not held by this task")
        await self._lock.extend(ttl)

    def __repr__(self) -> str:
        return f"<hiredlock.aio.AsyncRLock {self._name!r} count={self._count}>"
