"""AsyncSemaphore: the Semaphore of hiredlock.aio (the algorithm is _core/semaphores.py's)."""

from __future__ import annotations

import asyncio
from typing import Any, Optional

from .._core.errors import HiredlockError, LockNotAcquired, Vote
from .._core.semaphores import PermitBase, SemaphoreBase
from .._core.validation import Duration
from .._core.with_blocks import release_failed_on_exit
from ._lock import AsyncLock


class AsyncPermit(PermitBase, AsyncLock):
    """One permit of an AsyncSemaphore, with the AsyncLock API. Its key is
    `hiredlock:permit:<index>:<name>`."""

    __slots__ = ()
    _kind = "AsyncPermit"


class AsyncSemaphore(SemaphoreBase[AsyncPermit]):
    """As Semaphore, for asyncio: `await semaphore.acquire()` gives an AsyncPermit or None;
    `async with semaphore:` takes a permit for the block. Tasks may share one AsyncSemaphore:
    each `async with` releases the permit its own task took. Cancelling acquire() leaves no
    key behind (as AsyncLock.acquire)."""

    _permit_class = AsyncPermit

    async def acquire(
        self, blocking: bool = True, timeout: Optional[Duration] = None
    ) -> Optional[AsyncPermit]:
        """As Semaphore.acquire; waits between attempts on the event loop."""
        steps = self._acquire_steps(blocking, timeout)
        outcome: tuple[Optional[AsyncPermit], tuple[Vote, ...]] = await self._session.rounds.run(
            steps
        )
        permit, votes = outcome
        if permit is None:
            self._refused(votes)
        return permit

    async def __aenter__(self) -> AsyncPermit:
        permit = await self.acquire(timeout=self._blocking_timeout)
        if permit is None:
            raise LockNotAcquired(
                f"no permit of semaphore {self._name!r} was acquired", self._last_votes
            )
        self._entering(asyncio.current_task(), permit)
        return permit

    async def __aexit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        permit = self._leaving(asyncio.current_task())
        try:
            await permit.release()
        except HiredlockError as error:
            release_failed_on_exit(self._name, exc_type, error)
