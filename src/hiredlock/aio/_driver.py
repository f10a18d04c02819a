"""The asyncio driver: waits for an engine's round on an event loop instead of in poll().

The round (see hiredlock._engines.python_engine._Round, and the native engine's NativeRound) says
which sockets it waits on and until when; this driver registers those sockets with loop.add_reader /
loop.add_writer and one loop.call_at timer, feeds the round what the loop reports, and keeps the
registrations in step with what the round wants after every event. No threads, only the loop's
public interface (uvloop's too).

start() drives a round with callbacks only (no task): `on_end(None)` once the round is finished
and ended, or `on_end(exc)` after an exception from inside an event (never expected), which breaks
the round off: its connections go, since what they owe is then unknown. drive() awaits the same.
However drive() ends, nothing stays registered on the loop and the round is ended: finished, or
given up (a cancelled task) with every reply still owed accounted for, so that a later round reads
and drops it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable, Optional

from .._engines.poller import POLLIN, POLLOUT


class _Registrations:
    """The round's sockets and timer on the loop, kept equal to what the round waits for."""

    def __init__(
        self, rnd: Any, loop: asyncio.AbstractEventLoop, on_end: Callable[[Any], None]
    ) -> None:
        self.rnd = rnd
        self.loop = loop
        self.on_end = on_end
        self.ended = False
        self.readers: set[int] = set()
        self.writers: set[int] = set()
        self.timer: Optional[asyncio.TimerHandle] = None
        self.timer_due_ns = 0

    def on_readable(self, fd: int) -> None:
        self._feed(self.rnd.on_ready, fd, True, False)

    def on_writable(self, fd: int) -> None:
        self._feed(self.rnd.on_ready, fd, False, True)

    def on_timer(self) -> None:
        self.timer = None
        self._feed(self.rnd.on_deadline, time.monotonic_ns())

    def _feed(self, handler: Any, *event: Any) -> None:
        if self.ended:
            return  # an event the loop had already collected before the round ended
        try:
            handler(*event)
            self.update()
        except BaseException as exc:
            self.clear()
            self.ended = True
            self.rnd.break_off()
            self.rnd.before_close = None
            self.on_end(exc)

    def update(self) -> None:
        """Registers what the round now waits for, unregisters the rest; ends the round (its end
        time is now, not when the awaiting task next runs) once it is finished."""
        rnd = self.rnd
        if rnd.finished():
            self.clear()
            self.ended = True
            rnd.end()
            rnd.before_close = None
            self.on_end(None)
            return
        wanted = rnd.fds_wanted()
        readers = {fd for fd, events in wanted.items() if events & POLLIN}
        writers = {fd for fd, events in wanted.items() if events & POLLOUT}
        loop = self.loop
        for fd in self.readers - readers:
            loop.remove_reader(fd)
        for fd in self.writers - writers:
            loop.remove_writer(fd)
        for fd in readers - self.readers:
            loop.add_reader(fd, self.on_readable, fd)
        for fd in writers - self.writers:
            loop.add_writer(fd, self.on_writable, fd)
        self.readers = readers
        self.writers = writers
        self._set_timer(rnd.next_deadline_ns)

    def _set_timer(self, due_ns: int) -> None:
        if self.timer is not None:
            if due_ns == self.timer_due_ns:
                return
            self.timer.cancel()
        # The loop's clock may not be time.monotonic (uvloop's is coarser): the delay is taken
        # from the round's clock, and the round ignores a timer that fires early.
        delay_s = max(0, due_ns - time.monotonic_ns()) / 1e9
        self.timer = self.loop.call_at(self.loop.time() + delay_s, self.on_timer)
        self.timer_due_ns = due_ns

    def forget(self, fd: int) -> None:
        """The round is about to close this socket: off the loop first (fd numbers are reused)."""
        if fd in self.readers:
            self.readers.discard(fd)
            self.loop.remove_reader(fd)
        if fd in self.writers:
            self.writers.discard(fd)
            self.loop.remove_writer(fd)

    def give_up(self) -> None:
        """Ends the round now (between events its state is whole, so it can be accounted)."""
        if self.ended:
            return
        self.clear()
        self.ended = True
        self.rnd.end()
        self.rnd.before_close = None

    def clear(self) -> None:
        for fd in self.readers:
            self.loop.remove_reader(fd)
        for fd in self.writers:
            self.loop.remove_writer(fd)
        self.readers = set()
        self.writers = set()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None


def start(rnd: Any, loop: asyncio.AbstractEventLoop, on_end: Callable[[Any], None]) -> Any:
    """Drives a begun round on `loop` with callbacks; on_end(None or the exception) is called
    once, after the round has ended (possibly before start() returns). Returns a handle whose
    give_up() ends the round early, its owed replies accounted for."""
    registrations = _Registrations(rnd, loop, on_end)
    rnd.before_close = registrations.forget
    registrations.update()
    return registrations


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

    registrations = start(rnd, loop, on_end)
    try:
        await done
    except asyncio.CancelledError:
        registrations.give_up()
        raise
