"""AsyncLock and AsyncRLock: hiredlock's locks for asyncio (the algorithm is
_core/lock_steps.py's)."""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from typing import TYPE_CHECKING, Any, Optional

from .._core import clock as _clock
from .._core.compat import Self, Unpack
from .._core.errors import HiredlockError, LockNotAcquired, Vote
from .._core.lock_steps import LockBase, acquire_deadline
from .._core.options import LockOptions
from .._core.reentrant import ReentrantBase
from .._core.validation import Duration
from .._core.with_blocks import release_failed_on_exit
from ._gate import TaskGate

if TYPE_CHECKING:
    from .._core.state_mutex import StateMutex
    from ._redlock import AsyncRedlock

_log = logging.getLogger("hiredlock.callbacks")


class AsyncWithStatement:
    """`async with lock:` for AsyncLock and AsyncRLock: acquire within the lock's
    blocking_timeout or raise LockNotAcquired (the body never runs unlocked); release on exit.
    When the body raised, its exception wins and a failed release is only logged beside it."""

    __slots__ = ()
    _blocking_timeout: Optional[float]
    _last_votes: tuple[Vote, ...]
    _name: str | bytes

    if TYPE_CHECKING:  # what the lock classes this serves define

        async def acquire(
            self, blocking: bool = True, timeout: Optional[Duration] = None
        ) -> bool: ...

        async def release(self) -> None: ...

    async def __aenter__(self) -> Self:
        if not await self.acquire(timeout=self._blocking_timeout):
            raise LockNotAcquired(f"lock {self._name!r} was not acquired", self._last_votes)
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        try:
            await self.release()
        except HiredlockError as error:
            release_failed_on_exit(self._name, exc_type, error)


class AsyncLock(LockBase, AsyncWithStatement):
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
        event: asyncio.Event = super().lost
        return event

    async def acquire(self, blocking: bool = True, timeout: Optional[Duration] = None) -> bool:
        """As Lock.acquire: True once held by a valid quorum; False when it stayed taken until
        the deadline (or at once with blocking=False); QuorumUnreachable, MasterConfigError and
        AlreadyAcquired as there. Waits between attempts with asyncio.sleep.

        An AsyncLock shared by tasks is held by one of them at a time, as an asyncio.Lock is:
        another task's acquire() waits for its release (in the order they came, within the same
        deadline), or returns False at once with blocking=False."""
        deadline_ns = acquire_deadline(blocking, timeout, self._blocking_timeout)
        entered = self._try_gate()
        if entered is False and not (blocking and await self._gate.enter(deadline_ns)):
            return False  # another task held the lock object throughout
        turn = self._turn_gate(blocking, entered)
        try:
            if turn is not None and not turn.try_enter():
                waited_from = _clock.monotonic_ns()
                if not await turn.enter(deadline_ns):  # other waiters' turns until the deadline
                    self._turn_missed(waited_from)
                    return False
            steps = self._acquire_steps(blocking, deadline_ns, turn)
            acquired: bool = await self._rounds.run(steps)
        except BaseException:
            self._leave_gate_unless_held()
            raise
        finally:
            if turn is not None:
                self._end_turn(turn)
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

    async def check(self) -> float:
        """As Lock.check: the validity a round of every master proves (seconds), without
        re-arming the lock; LockLost (and `lost` set) when fewer than a quorum hold our token."""
        validity: float = await self._rounds.run(self._check_steps())
        return validity

    # -- what LockBase asks of an asyncio lock --------------------------------------------------

    def _new_lost_event(self) -> asyncio.Event:
        return asyncio.Event()

    def _new_gate(self, mutex: Optional[StateMutex] = None) -> TaskGate:
        # (an event loop's tasks take turns without a mutex)
        return TaskGate()

    def _current_owner(self) -> Optional[asyncio.Task[Any]]:
        return asyncio.current_task()

    @staticmethod
    def _owner_ended(owner: asyncio.Task[Any]) -> bool:
        return owner.done()

    def _start_renewal(self, acquisition: int, due_ns: int) -> bool:
        spawned: bool = self._rounds.spawn(self._renewing(acquisition, due_ns))
        return spawned

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


class AsyncRLock(AsyncWithStatement, ReentrantBase[AsyncLock]):
    """A reentrant AsyncLock: the task that owns it may acquire it again; its last release
    unlocks the masters. Other tasks of this process wait on a local gate first (no network
    traffic while a sibling task holds it). Made by AsyncRedlock.rlock()."""

    _owner_kind = "task"
    _repr_name = "aio.AsyncRLock"

    def __init__(
        self,
        redlock: AsyncRedlock,
        name: str | bytes,
        ttl: Duration,
        **options: Unpack[LockOptions[AsyncLock]],
    ) -> None:
        ReentrantBase.__init__(self, lambda: AsyncLock(redlock, name, ttl, **options), name)

    def _new_gate(self) -> TaskGate:
        return TaskGate()

    _current = staticmethod(asyncio.current_task)

    async def acquire(self, blocking: bool = True, timeout: Optional[Duration] = None) -> bool:
        """As AsyncLock.acquire; True at once (counting) when this task owns it already."""
        if self._reentered(blocking):
            return True
        deadline_ns = self._deadline_ns(blocking, timeout)
        gate = self._gate
        if not gate.try_enter() and not (blocking and await gate.enter(deadline_ns)):
            return False
        try:
            lock = self._make_lock()
            remaining = self._remaining(deadline_ns)
            acquired = (
                await lock.acquire(True, remaining) if blocking else await lock.acquire(False)
            )
        except BaseException:
            gate.leave()
            raise
        return self._taken(lock, acquired)

    async def release(self) -> None:
        """Counts down; the owner's last release unlocks the masters (LockLost as release)."""
        lock = self._counted_down()
        if lock is None:
            return
        try:
            await lock.release()
        finally:
            self._gate.leave()

    async def extend(self, ttl: Optional[Duration] = None) -> None:
        await self._owned().extend(ttl)


def new_async_lock(client: Any, name: str | bytes, ttl: Duration) -> AsyncLock:
    """AsyncLock(client, name, ttl), AsyncRedlock.lock's usual call: allocated in C and set up by
    LockState._setup once compiled, as _lock.py's new_lock makes a Lock."""
    lock: AsyncLock = AsyncLock.__new__(AsyncLock)
    lock._setup(client, name, ttl)
    return lock
