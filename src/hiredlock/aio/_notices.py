"""Release notices for AsyncRedlock: the NoticeBoard of hiredlock._engines.notices driven by the
event loop (its reader and writer callbacks on the subscribers' sockets). No thread is started.

One timer per client at most, set for the next thing due: the earliest timeout of a waiting task,
or what the board has to do (NoticeBoard.next_due: an idle channel to forget, a subscriber to
reconnect; the last channel forgotten, LINGER_S after its last wait, ends the connections). Tasks
that only wait cost nothing until then; close() cancels it, ends the waits, and nothing
reopens."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from typing import TYPE_CHECKING, Optional

from .._core.requests import heard_on
from .._engines.notices import NoticeBoard, Subscriber, router_of
from .._engines.poller import POLLOUT

if TYPE_CHECKING:
    from .._core.session import Session

# The timeouts of waits that ended sooner stay in the heap until they come up: it is rebuilt
# without them when they are more than this many and more than half of it.
_COMPACT_AT = 64


class _FutureWaiter:
    __slots__ = ("ended", "future", "timed_out")

    def __init__(self, future: asyncio.Future[bool]) -> None:
        self.future = future
        self.timed_out = False  # its timeout came up, or the heap was emptied: not in it any more
        self.ended = False  # its wait returned

    def notify(self) -> None:
        if not self.future.done():
            self.future.set_result(True)


class LoopNotices:
    """wait() returns True on a notice for the channel, False at the timeout. The subscribers
    belong to the loop of the first wait (an AsyncRedlock is used in one loop)."""

    # (`heard` is the session's too: see ThreadNotices)
    __slots__ = (
        "_board",
        "_ended_early",
        "_loop",
        "_seq",
        "_session",
        "_timeouts",
        "_timer",
        "_timer_due",
        "_watched",
        "heard",
    )

    def __init__(self, session: Session) -> None:
        # (closed is the session's to say: set before close() is called)
        self._session = session
        self._board = NoticeBoard(session.masters, router_of(session))
        self._board.on_drop = self._unregister
        self.heard = self._board.heard  # (see NoticeBoard.heard)
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._watched: dict[int, tuple[Subscriber, bool]] = {}  # fd -> (subscriber, writer too)
        # the waits' timeouts: (time.monotonic() due, seq, waiter)
        self._timeouts: list[tuple[float, int, _FutureWaiter]] = []
        self._seq = itertools.count()
        self._ended_early = 0  # entries of _timeouts whose wait has ended
        self._timer: Optional[asyncio.TimerHandle] = None
        self._timer_due = 0.0  # (time.monotonic())

    async def wait(self, channel: bytes | tuple[bytes, ...], timeout: float, seen: int = 0) -> bool:
        """True when woken by a notice on `channel` (or any of a tuple's; or when it had more
        than `seen` notices already: see heard_on), False at the timeout (or when the client is
        closed meanwhile)."""
        loop = asyncio.get_running_loop()
        board = self._board
        if board.forget_parent():
            self._watched = {}
            self._timer = None
            self._forget_waits()  # (the parent's tasks: they do not run here)
        if self._session.closed:
            return False
        if self._loop is not loop:
            self._stop()
            self._forget_waits()  # (the closed loop's tasks: they will never run again)
            self._loop = loop
        if heard_on(board.heard, channel) != seen:
            return True
        future: asyncio.Future[bool] = loop.create_future()
        waiter = _FutureWaiter(future)
        now = time.monotonic()
        if board.add(channel, waiter):
            self._service(now)  # its subscription goes out now
        heapq.heappush(self._timeouts, (now + timeout, next(self._seq), waiter))
        self._schedule(now)
        try:
            return await future
        finally:
            waiter.ended = True
            if not waiter.timed_out:
                self._ended_early += 1
            if not self._session.closed:
                now = time.monotonic()
                board.remove(channel, waiter, now)
                self._schedule(now)

    def close(self) -> None:
        """Closes the subscribers (no I/O is awaited: only close()) and ends the waits (they
        return False at once); no timer is left."""
        for waiter in self._forget_waits():
            future = waiter.future
            if not future.done() and not future.get_loop().is_closed():
                future.set_result(False)
        self._stop()

    def _forget_waits(self) -> list[_FutureWaiter]:
        """Empties the timeouts' heap; returns the waits still waiting."""
        timeouts, self._timeouts = self._timeouts, []
        self._ended_early = 0
        waiting = []
        for _due, _seq, waiter in timeouts:
            waiter.timed_out = True  # (out of the heap)
            if not waiter.ended:
                waiting.append(waiter)
        return waiting

    def _stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._board.close_all()

    # -- the one timer -------------------------------------------------------------------------

    def _schedule(self, now: float) -> None:
        """Sets the timer for the next thing due, unless it is set for that or sooner."""
        loop = self._loop
        if self._session.closed or loop is None or loop.is_closed():
            return
        due = self._next_due(now)
        timer = self._timer
        if timer is not None:
            if due is not None and self._timer_due <= due:
                return  # (sooner: it sets the next one when it fires)
            timer.cancel()
            self._timer = None
        if due is not None:
            # (from time.monotonic(): the loop's clock may differ, uvloop's is coarser; a timer
            # that fires early finds nothing due and is set again)
            self._timer = loop.call_later(max(0.0, due - now), self._on_timer)
            self._timer_due = due

    def _next_due(self, now: float) -> Optional[float]:
        timeouts = self._timeouts
        while timeouts and timeouts[0][2].ended:
            heapq.heappop(timeouts)
            self._ended_early -= 1
        if self._ended_early > _COMPACT_AT and 2 * self._ended_early > len(timeouts):
            self._timeouts = timeouts = [entry for entry in timeouts if not entry[2].ended]
            heapq.heapify(timeouts)
            self._ended_early = 0
        due = timeouts[0][0] if timeouts else None
        board_due = self._board.next_due(now)
        if board_due is not None and (due is None or board_due < due):
            due = board_due
        return due

    def _on_timer(self) -> None:
        self._timer = None
        if self._session.closed:
            return
        now = time.monotonic()
        timeouts = self._timeouts
        while timeouts and timeouts[0][0] <= now:
            _due, _seq, waiter = heapq.heappop(timeouts)
            if waiter.ended:
                self._ended_early -= 1
                continue
            waiter.timed_out = True
            if not waiter.future.done():
                waiter.future.set_result(False)
        self._service(now)
        self._schedule(now)

    def _service(self, now: float) -> None:
        """The board's service; the connections close once no channel is left."""
        board = self._board
        board.service(now)
        if not board.wanted():  # the last channel's LINGER_S is over: the connections go
            board.close_all()
            return
        self._watch()

    # -- the subscribers' sockets ----------------------------------------------------------------

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
        now = time.monotonic()
        # (notices alone change no socket and nothing due: the waits they end look again)
        if self._board.readable(subscriber, now):
            self._watch()
            self._schedule(now)  # (it may have gone down, or come up)

    def _on_writable(self, subscriber: Subscriber) -> None:
        now = time.monotonic()
        self._board.writable(subscriber, now)
        self._watch()
        self._schedule(now)
