"""The local gate of a lock object shared by the tasks of an event loop (hiredlock._sync.gate's
ThreadGate for threads): held by one task at a time, handed to the waiters in the order they came.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Optional

from .._core.local_gate import LocalGate


class TaskGate(LocalGate):
    """Held by one task at a time; any task may leave it (as asyncio.Lock's release)."""

    __slots__ = ("_held", "_waiters", "owner")

    def __init__(self) -> None:
        self._held = False
        self._waiters: deque[asyncio.Future[None]] = deque()
        self.owner: Optional[asyncio.Task[object]] = None  # the task that entered last

    def is_held(self) -> bool:
        return self._held

    @property
    def waiting(self) -> bool:
        """Whether some task waits for the gate."""
        return any(not waiter.done() for waiter in self._waiters)

    def try_enter(self) -> bool:
        if self._held:
            return False
        self._held = True
        self.owner = asyncio.current_task()
        return True

    def mine(self) -> bool:
        """Whether the calling task holds the gate."""
        return self._held and self.owner is asyncio.current_task()

    async def enter(self, deadline_ns: Optional[int]) -> bool:
        """Waits for the gate until the deadline (monotonic ns; None: for ever); False when it
        stayed held. A waiter cancelled or timed out just as the gate was handed to it passes
        it on."""
        if self.try_enter():
            return True
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            if deadline_ns is None:
                await waiter
            else:
                remaining = max(0.0, (deadline_ns - time.monotonic_ns()) / 1e9)
                await asyncio.wait_for(waiter, remaining)
        except BaseException as exc:
            if waiter.done() and not waiter.cancelled():
                self.leave()  # handed to us as we gave up: the next one gets it
            else:
                waiter.cancel()
            if isinstance(exc, asyncio.TimeoutError):
                return False
            raise
        self.owner = asyncio.current_task()
        return True

    def leave_under_mutex(self) -> bool:
        if self._waiters:
            return True  # (handed over by leave(): its futures' callbacks run Python code)
        self.leave()  # (no waiter: it only frees the gate)
        return False

    def leave(self) -> None:
        """Hands the gate to the first live waiter, or frees it."""
        self.owner = None
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # (still held: now the waiter's)
                return
        self._held = False
