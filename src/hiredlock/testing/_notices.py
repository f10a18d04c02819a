"""Release notices on masters in memory: what hiredlock._engines.notices does with subscriber
connections, done in the process. Every PUBLISH of the group's masters (a release's) reaches every
client of the group at once: its waiters on that channel wake and try again. A stopped master
publishes when it resumes (it runs the release then), a killed one never: as on servers.

The interface is the notices' (wait(channel, timeout, seen), heard, close()); `heard` counts the
notices of every channel published while the client is open.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any, Optional

from .._core.requests import channels_of, heard_on

if TYPE_CHECKING:
    from .._core.session import Session
    from ._masters import MemoryMasters


class _MemoryNotices:
    """What both kinds share: the notices heard per channel, and the waiters on each channel (a
    waiter is woken with `_wake(waiter, True)` on a notice, `_wake(waiter, False)` on close())."""

    def __init__(self, group: MemoryMasters, session: Session) -> None:
        self._session = session
        self._mutex = threading.Lock()
        self.heard: dict[bytes, int] = {}
        self._waiters: dict[bytes, set[Any]] = {}
        group.listen(self)

    def notice(self, channel: bytes) -> None:
        with self._mutex:
            self.heard[channel] = self.heard.get(channel, 0) + 1
            waiting = list(self._waiters.get(channel, ()))
        for waiter in waiting:
            self._wake(waiter, True)

    def waiting(self, channel: bytes) -> bool:
        return bool(self._waiters.get(channel))

    def close(self) -> None:
        """Ends the waits (they return at once)."""
        with self._mutex:
            waiting = [waiter for waiters in self._waiters.values() for waiter in waiters]
        for waiter in waiting:
            self._wake(waiter, False)

    def _wake(self, waiter: Any, notified: bool) -> None:
        raise NotImplementedError

    def _enter(self, channel: bytes | tuple[bytes, ...], seen: int, waiter: Any) -> Optional[bool]:
        """Registers `waiter` on `channel` (or on each of a tuple's); or the wait's answer at
        once: False when the client is closed, True when it had a notice since `seen` (see
        heard_on)."""
        with self._mutex:
            if self._session.closed:
                return False
            if heard_on(self.heard, channel) != seen:
                return True
            for one in channels_of(channel):
                self._waiters.setdefault(one, set()).add(waiter)
        return None

    def _leave(self, channel: bytes | tuple[bytes, ...], waiter: Any) -> None:
        with self._mutex:
            for one in channels_of(channel):
                waiting = self._waiters.get(one)
                if waiting is not None:
                    waiting.discard(waiter)
                    if not waiting:
                        del self._waiters[one]


class ThreadMemoryNotices(_MemoryNotices):
    """A blocking client's: wait() blocks the calling thread until a notice or the timeout."""

    def wait(self, channel: bytes | tuple[bytes, ...], timeout: float, seen: int = 0) -> bool:
        """True when woken by a notice on `channel` (or any of a tuple's; or when it had more
        than `seen` notices already), False at the timeout."""
        event = threading.Event()
        answer = self._enter(channel, seen, event)
        if answer is not None:
            return answer
        try:
            return event.wait(timeout)
        finally:
            self._leave(channel, event)

    def _wake(self, waiter: Any, notified: bool) -> None:
        waiter.set()  # (after close() too: its waits return at once)


class LoopMemoryNotices(_MemoryNotices):
    """An asyncio client's: wait() awaits a notice or the timeout. A notice may come from any
    thread (another client of the same masters): it wakes the waiter on its loop."""

    async def wait(self, channel: bytes | tuple[bytes, ...], timeout: float, seen: int = 0) -> bool:
        """True when woken by a notice on `channel` (or any of a tuple's; or when it had more
        than `seen` notices already), False at the timeout (or when the client is closed
        meanwhile)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        answer = self._enter(channel, seen, future)
        if answer is not None:
            return answer
        timer = loop.call_later(timeout, _settle, future, False)
        try:
            return await future
        finally:
            timer.cancel()
            self._leave(channel, future)

    def _wake(self, waiter: Any, notified: bool) -> None:
        _settle_soon(waiter, notified)


def _settle(future: asyncio.Future[bool], value: bool) -> None:
    if not future.done():
        future.set_result(value)


def _settle_soon(future: asyncio.Future[bool], value: Any) -> None:
    loop = future.get_loop()
    if loop.is_closed():
        return
    try:
        loop.call_soon_threadsafe(_settle, future, value)
    except RuntimeError:  # (the loop closed meanwhile)
        return
