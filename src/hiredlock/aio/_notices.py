"""Release notices for AsyncRedlock: the NoticeBoard of hiredlock._notices driven by the event
loop (its reader and writer callbacks on the subscribers' sockets, and a timer while anything is
subscribed). No thread is started."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Optional

from .._config import MasterSpec
from .._notices import TICK_S, NoticeBoard, Subscriber
from .._poller import POLLOUT


class _FutureWaiter:
    __slots__ = ("future",)

    def __init__(self, future: asyncio.Future) -> None:
        self.future = future

    def notify(self) -> None:
        if not self.future.done():
            self.future.set_result(True)


def _time_out(future: asyncio.Future) -> None:
    if not future.done():
        future.set_result(False)


class LoopNotices:
    """wait() returns True on a notice for the channel, False at the timeout. The subscribers
    belong to the loop of the first wait (an AsyncRedlock is used in one loop)."""

    def __init__(self, masters: Sequence[MasterSpec]) -> None:
        self._board = NoticeBoard(masters)
        self._board.on_drop = self._unregister
        self.heard = self._board.heard  # (see NoticeBoard.heard)
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._watched: dict[int, tuple[Subscriber, bool]] = {}  # fd -> (subscriber, writer too)
        self._timer: Optional[asyncio.TimerHandle] = None
        self._closed = False

    async def wait(self, channel: bytes, timeout: float, seen: int = 0) -> bool:
        """True when woken by a notice on `channel` (or when it had more than `seen` notices
        already), False at the timeout."""
        loop = asyncio.get_running_loop()
        board = self._board
        if board.forget_parent():
            self._watched = {}
            self._timer = None
        if self._closed:
            return False
        if self._loop is not loop:
            self._stop()
            self._loop = loop
        if board.heard.get(channel, 0) != seen:
            return True
        future = loop.create_future()
        waiter = _FutureWaiter(future)
        if board.add(channel, waiter) or self._timer is None:
            self._tick()
        handle = loop.call_later(timeout, _time_out, future)
        try:
            return await future
        finally:
            handle.cancel()
            board.remove(channel, waiter, time.monotonic())

    def close(self) -> None:
        """Closes the subscribers (no I/O is awaited: only close())."""
        self._closed = True
        self._stop()

    def _stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._board.close_all()

    def _tick(self) -> None:
        self._timer = None
        board = self._board
        now = time.monotonic()
        board.service(now)
        if not board.wanted():  # the last channel's LINGER_S is over: the connections go
            self._stop()
            return
        self._watch()
        self._timer = self._loop.call_later(TICK_S, self._tick)  # type: ignore[union-attr]

    def _watch(self) -> None:
        """Registers each open subscriber's socket with the loop for what it waits for."""
        loop = self._loop
        for subscriber in self._board.subscribers:
            if subscriber.sock is None:
                continue
            fd = subscriber.fileno()
            writer = bool(subscriber.events_wanted() & POLLOUT)
            known = self._watched.get(fd)
            if known is not None and known[0] is subscriber and known[1] == writer:
                continue
            if known is None:
                loop.add_reader(fd, self._on_readable, subscriber)  # type: ignore[union-attr]
            if writer:
                loop.add_writer(fd, self._on_writable, subscriber)  # type: ignore[union-attr]
            elif known is not None and known[1]:
                loop.remove_writer(fd)  # type: ignore[union-attr]
            self._watched[fd] = (subscriber, writer)

    def _unregister(self, subscriber: Subscriber) -> None:
        fd = subscriber.fileno()
        known = self._watched.pop(fd, None)
        if known is not None and self._loop is not None and not self._loop.is_closed():
            self._loop.remove_reader(fd)
            if known[1]:
                self._loop.remove_writer(fd)

    def _on_readable(self, subscriber: Subscriber) -> None:
        self._board.readable(subscriber, time.monotonic())
        self._watch()

    def _on_writable(self, subscriber: Subscriber) -> None:
        self._board.writable(subscriber, time.monotonic())
        self._watch()
