"""The asyncio driver: waits for an engine's rounds on an event loop instead of in poll().

The round (see hiredlock._engines.round.Round, and the native engine's NativeRound) says which
sockets it waits on and until when; a Driver registers those sockets with loop.add_reader /
loop.add_writer and keeps one loop.call_at timer, feeds the round what the loop reports, and keeps
the registrations in step with what the round wants after every event. No threads, only the loop's
public interface (uvloop's too).

A Driver serves one engine's rounds, one at a time (aio/_rounds.py keeps one per engine). The rules
that keep what is registered on the loop true, all here:

    readers   A reader stays registered after its round when the engine counts its closes
              (Engine.closes; `keep`): the next round on that connection then costs the loop
              nothing, instead of an add and a remove (two epoll_ctl, and the selector's misses)
              per master per round. A kept reader that fires when no round waits to read that
              socket (a late reply, the master closing) is removed then: a level-triggered
              reader left on would fire on every loop iteration.
    writers   Never outlive the round that wants them (a socket is writable nearly always).
    closes    Nothing stays registered on a socket that closes: the round tells before it closes
              one (before_close); a socket an engine closes without telling (in begin(), at a
              round's accounting, in a forked child) changes Engine.closes, and every kept
              registration then goes, before anything else can take that descriptor's number.
              Whoever closes the engine clears its Driver first (clear()): a connection handed to
              _engines/drain.py is a dup of the descriptor, and epoll would keep reporting it
              under the old number.
    timer     One timer at or before the round's deadline: a timer that comes due first is kept
              (it fires early, the round ignores an early on_deadline, and the timer is set
              again), so rounds that follow each other move no timer (a call_at and a cancel per
              round otherwise).

start() drives a round with callbacks only (no task): `on_end(None)` once the round is finished
and ended, or `on_end(exc)` after an exception from inside an event (never expected), which breaks
the round off: its connections go, since what they owe is then unknown. drive() awaits the same,
with a Driver of its own that keeps nothing: however drive() ends, nothing stays registered on
the loop and the round is ended: finished, or given up (a cancelled task) with every reply still
owed accounted for, so that a later round reads and drops it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Optional

from .._engines.poller import POLLIN, POLLOUT

_monotonic_ns = time.monotonic_ns


class Driver:
    """One engine's sockets and timer on one loop, for its rounds, one at a time."""

    __slots__ = (
        "closes",
        "keep",
        "loop",
        "on_end",
        "readers",
        "rnd",
        "seen",
        "timer",
        "timer_due_ns",
        "wanted",
        "writers",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop, engine: Any) -> None:
        self.loop = loop
        # The engine's count of closed connections (None: it keeps no count, so nothing is kept
        # between rounds). A bound method: the loop's handles keep the engine alive, so a
        # registered descriptor is never one an unreferenced engine closed.
        closes = getattr(engine, "closes", None)
        self.closes: Optional[Callable[[], int]] = closes
        self.keep = closes is not None
        self.seen = closes() if closes is not None else 0
        self.readers: set[int] = set()  # registered on the loop
        self.writers: set[int] = set()
        self.rnd: Any = None  # the round in flight
        self.on_end: Optional[Callable[[Any], None]] = None
        # What the round in flight waits for as registered: its last fds_wanted(), less what
        # went since ({}: no round, or nothing registered for it yet)
        self.wanted: dict[int, int] = {}
        self.timer: Optional[asyncio.TimerHandle] = None
        self.timer_due_ns = 0

    # -- a round -------------------------------------------------------------------------------

    def start(self, rnd: Any, on_end: Callable[[Any], None]) -> None:
        """Drives a begun round; on_end(None or the exception) is called once, after the round
        has ended (possibly before start() returns)."""
        self.rnd = rnd
        self.on_end = on_end
        self.wanted = {}
        rnd.before_close = self.forget
        self.update()

    def give_up(self) -> None:
        """Ends the round now (between events its state is whole, so it can be accounted)."""
        rnd = self.rnd
        if rnd is None:
            return
        self._end_round()
        rnd.end()
        rnd.before_close = None
        self._check_closes()

    # -- the loop's callbacks ------------------------------------------------------------------

    def on_readable(self, fd: int) -> None:
        if not self.wanted.get(fd, 0) & POLLIN:  # (no round, or one not reading it)
            self.readers.discard(fd)
            self.loop.remove_reader(fd)
            return
        self._feed(fd, True, False)

    def on_writable(self, fd: int) -> None:
        if self.rnd is None:  # (collected by the loop before the round ended)
            return
        self._feed(fd, False, True)

    def on_timer(self) -> None:
        self.timer = None
        if self.rnd is not None:
            self._feed(-1, False, False)

    def _feed(self, fd: int, readable: bool, writable: bool) -> None:
        """Hands the round an event: a socket's readiness, or (fd -1) the time, for its
        deadline."""
        rnd = self.rnd
        try:
            if fd < 0:
                rnd.on_deadline(_monotonic_ns())
            else:
                rnd.on_ready(fd, readable, writable)
            self.update()
        except BaseException as exc:
            if self.rnd is not rnd:
                raise  # (from on_end, after the round ended: the loop reports it)
            on_end = self.on_end
            self._end_round()
            self.clear()  # its connections go, unregistered first
            rnd.break_off()
            rnd.before_close = None
            self._check_closes()
            assert on_end is not None
            on_end(exc)

    # -- registrations -------------------------------------------------------------------------

    def update(self) -> None:
        """Registers what the round now waits for; ends the round (its end time is now, not when
        the awaiting task next runs) once it is finished."""
        rnd = self.rnd
        if self.keep and self.closes() != self.seen:  # type: ignore[misc]
            self._check_closes()
        if rnd.finished():
            on_end = self.on_end
            self._end_round()
            rnd.end()
            rnd.before_close = None
            self._check_closes()
            assert on_end is not None
            on_end(None)
            return
        wanted = rnd.fds_wanted()
        if wanted != self.wanted:
            if self.keep and not self.writers and wanted.items() <= self.wanted.items():
                # (fewer sockets, the usual change after a reply: their readers stay)
                self.wanted = wanted
            else:
                self._register(wanted)
        due_ns = rnd.next_deadline_ns
        if self.timer is None or due_ns < self.timer_due_ns:
            self._set_timer(due_ns)

    def _register(self, wanted: dict[int, int]) -> None:
        loop = self.loop
        readers = self.readers
        writers = self.writers
        for fd, events in wanted.items():
            if events & POLLIN and fd not in readers:
                loop.add_reader(fd, self.on_readable, fd)
                readers.add(fd)
            if events & POLLOUT and fd not in writers:
                loop.add_writer(fd, self.on_writable, fd)
                writers.add(fd)
        if writers:
            for fd in [fd for fd in writers if not wanted.get(fd, 0) & POLLOUT]:
                writers.discard(fd)
                loop.remove_writer(fd)
        if not self.keep:
            for fd in [fd for fd in readers if not wanted.get(fd, 0) & POLLIN]:
                readers.discard(fd)
                loop.remove_reader(fd)
        self.wanted = wanted

    def _set_timer(self, due_ns: int) -> None:
        if self.timer is not None:
            self.timer.cancel()
        # The loop's clock may not be time.monotonic (uvloop's is coarser): the delay is taken
        # from the round's clock, and the round ignores a timer that fires early.
        delay_s = max(0, due_ns - _monotonic_ns()) / 1e9
        self.timer = self.loop.call_at(self.loop.time() + delay_s, self.on_timer)
        self.timer_due_ns = due_ns

    def _end_round(self) -> None:
        """The round is over for the driver: its writers go (and, kept by no count, its readers
        and timer); the readers it kept wait for the next round."""
        self.rnd = None
        self.on_end = None
        self.wanted = {}
        if self.writers:
            loop = self.loop
            for fd in self.writers:
                loop.remove_writer(fd)
            self.writers = set()
        if not self.keep:
            self.clear()

    def _check_closes(self) -> None:
        """A connection closed without the round telling: every kept registration goes (the
        round in flight, if any, registers what it waits for again)."""
        if not self.keep:
            return
        seen = self.closes()  # type: ignore[misc]
        if seen == self.seen:
            return
        self.seen = seen
        loop = self.loop
        for fd in self.readers:
            loop.remove_reader(fd)
        for fd in self.writers:
            loop.remove_writer(fd)
        self.readers = set()
        self.writers = set()
        self.wanted = {}

    def forget(self, fd: int) -> None:
        """The round is about to close this socket: off the loop first (fd numbers are reused)."""
        if fd in self.readers:
            self.readers.discard(fd)
            self.loop.remove_reader(fd)
        if fd in self.writers:
            self.writers.discard(fd)
            self.loop.remove_writer(fd)
        self.wanted = {}

    def clear(self) -> None:
        """Nothing of this driver's on the loop any more (before its engine closes)."""
        loop = self.loop
        for fd in self.readers:
            loop.remove_reader(fd)
        for fd in self.writers:
            loop.remove_writer(fd)
        self.readers = set()
        self.writers = set()
        self.wanted = {}
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


def start(rnd: Any, loop: asyncio.AbstractEventLoop, on_end: Callable[[Any], None]) -> Driver:
    """Drives a begun round on `loop` with callbacks and a Driver that keeps nothing after it;
    on_end(None or the exception) is called once, after the round has ended (possibly before
    start() returns). Returns the Driver, whose give_up() ends the round early, its owed replies
    accounted for."""
    driver = Driver(loop, None)
    driver.start(rnd, on_end)
    return driver


async def drive(rnd: Any, loop: Optional[asyncio.AbstractEventLoop] = None) -> None:
    """Waits for a round begun on an engine (engine.begin(request)) until it is finished;
    engine.finish(rnd) then gives its results. The round is ended when this returns or raises
    (cancelled included)."""
    if loop is None:
        loop = asyncio.get_running_loop()
    done = loop.create_future()

    def on_end(exc: Any) -> None:
        if done.done():
            return
        if exc is None:
            done.set_result(None)
        else:
            done.set_exception(exc)

    driver = start(rnd, loop, on_end)
    try:
        await done
    except asyncio.CancelledError:
        driver.give_up()
        raise
