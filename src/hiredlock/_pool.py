"""A small pool of engines, so that threads never share a connection and never wait for one.

Each thread that calls into a Redlock at the same moment gets an engine (one connection per
master) of its own; engines come back for reuse when the call ends. After a burst of threads the
pool gives the connections back:

- at most MAX_IDLE engines are kept idle; one coming back past that is closed at once;
- every IDLE_LIFETIME_S, the idle engines that no call needed during that whole period (the low
  point of the idle list) are closed, down to one. This is checked when engines come back, so an
  application that stops calling keeps at most MAX_IDLE engines until its next call or close().

It takes no lock of its own: list.append and list.pop are atomic, and this is on every round's
path. close() and a concurrent checkin() are ordered by re-checking `closed` after the append.
"""

from __future__ import annotations

import time
from typing import Callable

from . import _fork
from ._contract import Engine
from ._errors import HiredlockError

MAX_IDLE = 4
IDLE_LIFETIME_S = 30.0


class EnginePool:
    """Hands each caller an engine of its own; engines come back for reuse when the call ends."""

    def __init__(self, factory: Callable[[], Engine]) -> None:
        self._factory = factory
        self._idle: list[Engine] = []
        # Every engine made and not closed yet, checked out ones too: a forked child closes
        # them all (the parent's threads that were using some do not exist there).
        self._live: dict[int, Engine] = {}
        self._low_water = 0  # the fewest idle engines since the last trim
        self._next_trim = time.monotonic() + IDLE_LIFETIME_S
        self._closed = False
        self._generation = _fork.generation

    def checkout(self) -> Engine:
        # (an attribute read, on every round's path: see _fork)
        if self._generation != _fork.generation:
            self._after_fork()
        if self._closed:
            raise HiredlockError("this Redlock is closed")
        try:
            return self._idle.pop()
        except IndexError:
            engine = self._factory()
            self._live[id(engine)] = engine
            return engine

    def checkin(self, engine: Engine) -> None:
        if self._closed or self._generation != _fork.generation:
            self._close(engine)
            return
        idle = self._idle
        if idle:
            self._beside_others(engine)  # several threads: the bookkeeping of bursts
        else:
            # The pool is empty at this moment, so no idle engine went unused since the last
            # trim. (A single-threaded loop pays only this on its way back.)
            self._low_water = 0
            idle.append(engine)
        if self._closed:  # close() ran meanwhile and may have missed this engine
            self._close_idle()

    def _beside_others(self, engine: Engine) -> None:
        """Checks in an engine while others are idle: closes it past MAX_IDLE, keeps the low
        point of the idle list (the first checkin after the low point sees it), trims."""
        idle = self._idle
        count = len(idle)
        if count < self._low_water:
            self._low_water = count
        if count >= MAX_IDLE:
            self._close(engine)
            return
        idle.append(engine)
        self._trim()

    def close(self) -> None:
        self._closed = True
        self._close_idle()

    @property
    def idle_count(self) -> int:
        return len(self._idle)

    def _trim(self) -> None:
        now = time.monotonic()
        if now < self._next_trim:
            return
        self._next_trim = now + IDLE_LIFETIME_S
        for _ in range(min(self._low_water, len(self._idle) - 1)):
            try:
                engine = self._idle.pop(0)  # the least recently used
            except IndexError:
                break
            self._close(engine)
        self._low_water = len(self._idle)

    def _close(self, engine: Engine) -> None:
        self._live.pop(id(engine), None)
        engine.close()

    def _close_idle(self) -> None:
        while True:
            try:
                engine = self._idle.pop()
            except IndexError:
                return
            self._close(engine)

    def _after_fork(self) -> None:
        # The parent's engines hold the parent's sockets: close our copies of them (an engine's
        # close() sends nothing in a child: see the engines) and start afresh.
        self._generation = _fork.generation
        self._idle = []
        inherited, self._live = self._live, {}
        for engine in inherited.values():
            engine.close()
