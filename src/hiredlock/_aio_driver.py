"""The asyncio driver: waits for a python engine round on an event loop instead of in poll().

The round (see _engine_py._Round) says which sockets it waits on and until when; this driver
registers those sockets with loop.add_reader / loop.add_writer and one loop.call_at timer, feeds
the round what the loop reports, and keeps the registrations in step with what the round wants
after every event. No threads, only the loop's public interface (uvloop's too).

However drive() ends, nothing stays registered on the loop and the round is ended: finished, or
given up (a cancelled task) with every reply still owed accounted for, so that a later round reads
and drops it. An exception from inside an event (never expected) breaks the round off instead:
its connections go, since what they owe is then unknown.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Optional

from ._poller import POLLIN, POLLOUT


class _Registrations:
    """The round's sockets and timer on the loop, kept equal to what the round waits for."""

    def __init__(self, rnd: Any, loop: asyncio.AbstractEventLoop, done: asyncio.Future) -> None:
        self.rnd = rnd
        self.loop = loop
        self.done = done
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
        if self.done.done():
            return  # an event the loop had already collected before the round ended
        try:
            handler(*event)
            self.update()
        except BaseException as exc:
            self.done.set_exception(exc)

    def update(self) -> None:
        """Registers what the round now waits for, unregisters the rest; ends the round (its end
        time is now, not when the awaiting task next runs) once it is finished."""
        rnd = self.rnd
        if rnd.finished():
            self.clear()
            rnd.end()
            self.done.set_result(None)
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


async def drive(rnd: Any, loop: Optional[asyncio.AbstractEventLoop] = None) -> None:
    """Waits for a round begun on a python engine (begin_set_nx, begin_script) until it is
    finished; engine.finish(rnd) then gives its results. The round is ended when this returns
    or raises (cancelled included)."""
    if loop is None:
        loop = asyncio.get_running_loop()
    if rnd.finished():
        rnd.end()
        return
    done = loop.create_future()
    registrations = _Registrations(rnd, loop, done)
    rnd.before_close = registrations.forget
    try:
        registrations.update()
        await done
    except asyncio.CancelledError:
        registrations.clear()
        rnd.end()  # between events: the round's state is whole, so it can be accounted
        raise
    except BaseException:
        registrations.clear()
        rnd.break_off()
        raise
    finally:
        rnd.before_close = None
