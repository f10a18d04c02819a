"""A small pool of engines, so that threads never share a connection, and wait for one only when a
lock's commands must follow its earlier ones (below).

Each thread that calls into a Redlock at the same moment gets an engine (one connection per
master) of its own; engines come back for reuse when the call ends. After a burst of threads the
pool gives the connections back:

- at most MAX_IDLE engines are kept idle; one coming back past that is closed at once, unless
  it owes replies (a lock's next rounds must go out on it: see below);
- every IDLE_LIFETIME_S, the idle engines that no call needed during that whole period (the low
  point of the idle list) are closed, down to one. This is checked when engines come back, so an
  application that stops calling keeps at most MAX_IDLE engines until its next call or close().

It takes no lock of its own on the common path: a deque's append and pop are atomic, and this is
on every round's path. (A deque, through its bound append and pop: about 100 instructions each,
compiled. A list's append and pop are C calls once compiled, but a list emptied and refilled at
every round frees and reallocates its storage each time: some 250 instructions each.) Whether
the client is closed is its Session's to say (rounds_closed, set before close() is called);
close() and a concurrent checkin() are ordered by re-checking it after the append.

A caller may ask for one engine in particular (see the engine contract's owes_replies: a lock
whose last round left commands behind on a master must send its next ones behind them, on the
same connections). That engine is taken from the idle list, or waited for while another thread
uses it (for about one round at most); a closed one is not waited for.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Callable, Optional

from .._core.fork import generation as _fork_generation
from .._core.scripts import CONNECT_TIMEOUT_MIN_MS
from .._core.session import closed_error
from .contract import Engine
from .drain import close_draining

if TYPE_CHECKING:
    from .._core.session import Session

MAX_IDLE = 4
IDLE_LIFETIME_S = 30.0


class EnginePool:
    """Hands each caller an engine of its own; engines come back for reuse when the call ends."""

    __slots__ = (
        "_factory",
        "_generation",
        "_idle",
        "_live",
        "_low_water",
        "_next_trim",
        "_pop",
        "_push",
        "_returned",
        "_session",
        "_stale",
        "_waiting",
    )

    def __init__(self, session: Session) -> None:
        self._session = session
        self._factory: Callable[[], Engine] = session.new_engine
        self._stale: Optional[Callable[[Engine], bool]] = session.engine_stale
        self._idle: deque[Engine] = deque()
        self._push, self._pop = self._idle.append, self._idle.pop  # (see the module's doc)
        # Every engine made and not closed yet, checked out ones too: a forked child closes
        # them all (the parent's threads that were using some do not exist there).
        self._live: dict[int, Engine] = {}
        self._low_water = 0  # the fewest idle engines since the last trim
        self._next_trim = time.monotonic() + IDLE_LIFETIME_S
        self._generation = _fork_generation[0]
        self._returned = threading.Condition(threading.Lock())  # for callers waiting for one
        self._waiting = 0

    def checkout(self, prefer: Optional[Engine] = None, wait_ms: float = 0.0) -> Engine:
        # (a list read, on every round's path: see _core/fork.py)
        if self._generation != _fork_generation[0]:
            self._after_fork()
        if self._session.rounds_closed:
            raise closed_error()
        if prefer is not None and self._take(prefer, wait_ms):
            return prefer
        try:
            engine = self._pop()
        except IndexError:
            pass
        else:
            # (a cluster's engine made on an older table of links: see _engines/routing.py)
            if self._stale is None or not self._stale(engine) or engine.owes_replies():
                return engine
            self._close(engine)
        engine = self._factory()
        self._live[id(engine)] = engine
        return engine

    def _take(self, engine: Engine, wait_ms: float) -> bool:
        """Takes `engine` from the idle list, waiting while another thread uses it (at most
        wait_ms plus the connect allowance: a round's length); False when it was closed (trimmed,
        or in a forked child's fresh start), or did not come back in that time (a thread
        interrupted between its checkout and its round never gives it back)."""
        idle = self._idle
        deadline = None  # (from the first miss: most calls find it idle, and read no clock)
        while True:
            try:
                idle.remove(engine)  # (atomic: no other thread can take it meanwhile)
                return True
            except ValueError:
                pass
            if self._live.get(id(engine)) is not engine or self._session.rounds_closed:
                return False
            now = time.monotonic()
            if deadline is None:
                deadline = now + (wait_ms + CONNECT_TIMEOUT_MIN_MS) / 1000.0
            elif now > deadline:
                return False
            with self._returned:
                self._waiting += 1
                try:
                    # (notified at checkin; the timeout covers a checkin that came between the
                    # look at the idle list and this wait)
                    self._returned.wait(0.005)
                finally:
                    self._waiting -= 1

    def checkin(self, engine: Engine) -> None:
        session = self._session
        if session.rounds_closed or self._generation != _fork_generation[0]:
            self._close(engine)  # (in a forked child, nothing is handed over: owed_fds())
            return
        idle = self._idle
        if idle:
            self._beside_others(engine)  # several threads: the bookkeeping of bursts
        else:
            # The pool is empty at this moment, so no idle engine went unused since the last
            # trim. (A single-threaded loop pays only this on its way back.)
            self._low_water = 0
            self._push(engine)
        if session.rounds_closed:  # close() ran meanwhile and may have missed this engine
            self._close_idle()
        if self._waiting:  # a caller may be waiting for this one
            with self._returned:
                self._returned.notify_all()

    def _beside_others(self, engine: Engine) -> None:
        """Checks in an engine while others are idle: closes it past MAX_IDLE, keeps the low
        point of the idle list (the first checkin after the low point sees it), trims."""
        idle = self._idle
        count = len(idle)
        if count < self._low_water:
            self._low_water = count
        if count >= MAX_IDLE and not engine.owes_replies():
            self._close(engine)  # (one that owes replies stays: a lock's next rounds need it)
            return
        self._push(engine)
        self._trim()

    def close(self) -> None:
        """Closes the idle engines (once the session's rounds_closed is set: the others are
        closed as they come back)."""
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
                engine = self._idle.popleft()  # the least recently used
            except IndexError:
                break
            if engine.owes_replies():
                self._push(engine)  # a lock's next rounds may need it: kept
                continue
            self._close(engine)
        self._low_water = len(self._idle)

    def _close(self, engine: Engine) -> None:
        self._live.pop(id(engine), None)
        close_draining(engine)

    def _close_idle(self) -> None:
        while True:
            try:
                engine = self._pop()
            except IndexError:
                return
            self._close(engine)

    def _after_fork(self) -> None:
        # The parent's engines hold the parent's sockets: close our copies of them (an engine's
        # close() sends nothing in a child: see the engines) and start afresh.
        self._generation = _fork_generation[0]
        self._idle = deque()
        self._push, self._pop = self._idle.append, self._idle.pop
        self._returned = threading.Condition(threading.Lock())
        self._waiting = 0
        inherited, self._live = self._live, {}
        for engine in inherited.values():
            engine.close()
