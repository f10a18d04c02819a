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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .._core.session import Session
    from ._masters import MemoryMasters


class ThreadMemoryNotices:
    """A blocking client's: wait() blocks the calling thread until a notice or the timeout."""

    def __init__(self, group: MemoryMasters, session: Session) -> None:
        self._session = session
        self._mutex = threading.Lock()
        self.heard: dict[bytes, int] = {}
        self._waiters: dict[bytes, set[threading.Event]] = {}
        group.listen(self)

    def notice(self, channel: bytes) -> None:
        with self._mutex:
            self.heard[channel] = self.heard.get(channel, 0) + 1
            for event in self._waiters.get(channel, ()):
                event.set()

    def waiting(self, channel: bytes) -> bool:
        return bool(self._waiters.get(channel))

    def wait(self, channel: bytes, timeout: float, seen: int = 0) -> bool:
        """True when woken by a notice on `channel` (or when it had more than `seen` notices
        already), False at the timeout."""
        event = threading.Event()
        with self._mutex:
            if self._session.closed:
                return False
            if self.heard.get(channel, 0) != seen:
                return True
            self._waiters.setdefault(channel, set()).add(event)
        try:
            return event.wait(timeout)
        finally:
            with self._mutex:
                waiting = self._waiters.get(channel)
                if waiting is not None:
                    waiting.discard(event)
                    if not waiting:
                        del self._waiters[channel]

    def close(self) -> None:
        """Ends the waits (they return at once)."""
        with self._mutex:
            for waiting in self._waiters.values():
                for event in waiting:
                    event.set()


class LoopMemoryNotices:
    """An asyncio client's: wait() awaits a notice or the timeout. A notice may come from any
    thread (another client of the same masters): it wakes the waiter on its loop."""

    def __init__(self, group: MemoryMasters, session: Session) -> None:
        self._session = session
        self._mutex = threading.Lock()
        self.heard: dict[bytes, int] = {}
        self._waiters: dict[bytes, set[asyncio.Future[bool]]] = {}
        group.listen(self)

    def notice(self, channel: bytes) -> None:
        with self._mutex:
            self.heard[channel] = self.heard.get(channel, 0) + 1
            waiting = list(self._waiters.get(channel, ()))
        for future in waiting:
            _settle_soon(future, True)

    def waiting(self, channel: bytes) -> bool:
        return bool(self._waiters.get(channel))

    async def wait(self, channel: bytes, timeout: float, seen: int = 0) -> bool:
        """True when woken by a notice on `channel` (or when it had more than `seen` notices
        already), False at the timeout (or when the client is closed meanwhile)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        with self._mutex:
            if self._session.closed:
                return False
            if self.heard.get(channel, 0) != seen:
                return True
            self._waiters.setdefault(channel, set()).add(future)
        timer = loop.call_later(timeout, _settle, future, False)
        try:
            return await future
        finally:
            timer.cancel()
            with self._mutex:
                waiting = self._waiters.get(channel)
                if waiting is not None:
                    waiting.discard(future)
                    if not waiting:
                        del self._waiters[channel]

    def close(self) -> None:
        """Ends the waits (they return False at once)."""
        with self._mutex:
            waiting = [future for futures in self._waiters.values() for future in futures]
        for future in waiting:
            _settle_soon(future, False)


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
