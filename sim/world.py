"""The simulated world: one seeded virtual clock (a heap of events), masters in memory with faults,
and the driver that runs the library's step generators on them.

Everything happens on `World.now` (virtual nanoseconds), which the library reads through
hiredlock._core.clock while a world runs (see `World.installed`). Nothing sleeps and nothing is
random but `World.rng` and the library's own `random` calls (seeded by the world too), so a seed
replays exactly.

A round (SetNx, RunScript, Cleanup) is the engines' round in miniature: every command goes to
every master as a message with its own delay (or is lost); a master runs it on its MemoryStore at
the time it arrives, on its own clock, and the reply travels back with its own delay (or is lost).
The round is the memory engine's (hiredlock.testing._engine.MemoryRound, on this world's clock):
its votes are the engines' own `Votes` (reply -> vote, decided when, SKIPPED and TIMEOUT at the
end), and its stop rules are _engines/contract.py's as they apply where there are no connections
(said once, in that module's doc); replies after its end are dropped. A script goes as EVALSHA,
and as EVAL at once where the master says NOSCRIPT (an engine's resend, without its round trip).
Messages between one driver and one master keep their order (one connection each, as an engine
has); the owner's steps and a renewal are two drivers (a renewal runs on an engine of its own).
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Generator
from contextlib import contextmanager, nullcontext
from typing import Any, Callable, Optional

from hiredlock._core import clock as _clock
from hiredlock._core.requests import Pause, SetNx
from hiredlock._engines.master import KIND_SCRIPT, KIND_SET
from hiredlock._engines.resp import ReplyError
from hiredlock._engines.round import Votes
from hiredlock.testing._engine import MemoryRound
from hiredlock.testing._store import MemoryStore

MS = 1_000_000
EPOCH_NS = 1_700_000_000 * 10**9  # the virtual wall clock's origin (a fair lock's order reads it)


class Master:
    """One master: its keys (a MemoryStore), its clock (rate and steps), and its faults."""

    __slots__ = ("backlog", "base_ns", "base_t", "index", "rate", "state", "store", "world")

    def __init__(self, world: World, index: int, rate: float) -> None:
        self.world = world
        self.index = index
        self.store = MemoryStore()
        self.state = "up"  # "up", "stopped" (no answer until resumed) or "down" (crashed)
        self.backlog: list[tuple[list[bytes], Optional[bytes], Callable[[Any], None]]] = []
        self.rate = rate  # how fast this master's clock runs against the true one
        self.base_t = 0
        self.base_ns = world.rng.randrange(10**12)  # its clock's reading at base_t

    def clock_ms(self) -> int:
        return (self.base_ns + int((self.world.now - self.base_t) * self.rate)) // MS

    def step_clock(self, step_ns: int) -> None:
        now = self.world.now
        self.base_ns += int((now - self.base_t) * self.rate) + step_ns
        self.base_t = now

    def receive(
        self, args: list[bytes], source: Optional[bytes], reply: Callable[[Any], None]
    ) -> None:
        if self.state == "down":
            return  # lost with the connection
        if self.state == "stopped":
            self.backlog.append((args, source, reply))
            return
        reply(self.execute(args, source))

    def execute(self, args: list[bytes], source: Optional[bytes] = None) -> Any:
        now_ms = self.clock_ms()
        result = self.store.execute(args, now_ms)
        if source is not None and type(result) is ReplyError and result.text.startswith("NOSCRIPT"):
            self.world.stats["noscript"] += 1
            result = self.store.execute([b"EVAL", source, *args[2:]], now_ms)
        return result

    def resume(self) -> None:
        self.state = "up"
        backlog, self.backlog = self.backlog, []
        for args, source, reply in backlog:
            reply(self.execute(args, source))


class Link:
    """Messages of one driver to and from the masters: delays, losses, and their order kept per
    master."""

    __slots__ = ("last_in", "last_out", "world")

    def __init__(self, world: World) -> None:
        self.world = world
        n = len(world.masters)
        self.last_out = [0] * n  # when the last message to each master arrives
        self.last_in = [0] * n  # when the last reply from each master arrives

    def send(
        self,
        master: Master,
        args: list[bytes],
        source: Optional[bytes],
        on_reply: Callable[[Any], None],
    ) -> None:
        world = self.world
        if world.lost():
            return
        i = master.index
        arrive = self.last_out[i] = max(world.now + world.delay(), self.last_out[i])

        def reply(value: Any) -> None:
            if world.lost():
                return
            back = self.last_in[i] = max(world.now + world.delay(), self.last_in[i])
            world.at(back, lambda: on_reply(value))

        world.at(arrive, lambda: master.receive(args, source, reply))


class SimRound:
    """One round of a request on every master (see the module doc): its messages on the world's
    network, counted and stopped by the memory engine's round (MemoryRound: the contract's stop
    rules as they apply where there are no connections), on the world's clock."""

    __slots__ = ("done", "on_end", "round", "world")

    def __init__(
        self, world: World, link: Link, request: Any, on_end: Callable[[Any], None]
    ) -> None:
        self.world = world
        self.on_end = on_end
        self.done = False
        n = len(world.masters)
        if type(request) is SetNx:
            kind = KIND_SET
            commands = [
                [b"SET", key, token, b"NX", b"PX", b"%d" % request.ttl_ms]
                for key, token in zip(request.keys, request.tokens)
            ]
            want_values = False
            wait_all = False
            source = None
        else:
            kind = KIND_SCRIPT
            head = [b"EVALSHA", request.sha, b"%d" % request.numkeys]
            source = request.source
            commands = [head + list(argv) for argv in request.argvs]
            want_values = request.want_values
            wait_all = request.wait_all
        votes = Votes(len(commands), n, world.quorum, world.now, want_values, world.clock)
        deadline = world.now + int(request.timeout_ms * MS)
        self.round = rnd = MemoryRound(world, kind, votes, deadline, wait_all)
        rnd.owed = [len(commands)] * n
        world.at(deadline, self._at_deadline)
        for master in world.masters:
            for item, command in enumerate(commands):
                link.send(master, command, source, self._on_reply(master.index, item))

    def _on_reply(self, master: int, item: int) -> Callable[[Any], None]:
        def on_reply(reply: Any) -> None:
            if self.done:
                return
            self.round.reply(item, master, reply, 0)
            if self.round.finished():
                self.end()

        return on_reply

    def _at_deadline(self) -> None:
        if not self.done:
            self.round.on_deadline(self.world.now)
            self.end()

    def end(self) -> None:
        if self.done:
            return
        self.done = True
        rnd = self.round
        rnd.end()
        self.on_end(rnd.votes.results(rnd.ended_ns))


class World:
    """The clock, the events, the masters and the faults of one seed."""

    def __init__(self, seed: int, n_masters: int = 5) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.now = 10**9  # (not 0: Votes reads a decision time of 0 as none)
        self._events: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0
        self.stats: dict[str, int] = {"noscript": 0}
        self.loss = 0.0  # probability that a message is lost
        self.slow = 0.0  # probability that a message is slow (up to `slow_ms`)
        self.slow_ms = 0.0
        self.masters = [Master(self, i, 1.0) for i in range(n_masters)]
        self.lock = nullcontext()  # (as a MemoryMasters group's, for MemoryRound: one thread)
        self.quorum = n_masters // 2 + 1
        self.checks: list[Callable[[], None]] = []  # run after every event
        self.live: set[Generator[Any, Any, Any]] = set()  # the steps being driven

    # -- the clock and its events ----------------------------------------------------------------

    def at(self, when: int, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._events, (max(when, self.now), self._seq, action))

    def run(self, until: Optional[Callable[[], bool]] = None, limit_ns: int = 10**13) -> None:
        events = self._events
        checks = self.checks
        while events and (until is None or not until()):
            when, _, action = heapq.heappop(events)
            if when > limit_ns:
                from .checks import Violation

                raise Violation(self.seed, f"clients still running after {limit_ns / 1e9:g} s")
            self.now = when
            action()
            for check in checks:
                check()

    @contextmanager
    def installed(self) -> Generator[None, None, None]:
        """The library reads this world's clock (and its `random` is seeded by it) meanwhile."""
        saved = _clock.use(self.clock, lambda: EPOCH_NS + self.now), random.getstate()
        random.seed(self.rng.random())
        try:
            yield
        finally:
            _clock.use(*saved[0])
            random.setstate(saved[1])

    def clock(self) -> int:
        return self.now

    # -- the network ------------------------------------------------------------------------------

    def lost(self) -> bool:
        return self.loss > 0.0 and self.rng.random() < self.loss

    def delay(self) -> int:
        if self.slow and self.rng.random() < self.slow:
            return int(self.rng.uniform(0.0, self.slow_ms) * MS)
        return int(self.rng.uniform(0.05, 2.0) * MS)

    # -- the driver -----------------------------------------------------------------------------

    def drive(
        self,
        steps: Generator[Any, Any, Any],
        link: Link,
        done: Callable[[Any, Optional[BaseException]], None],
        on_request: Optional[Callable[[Any], Optional[BaseException]]] = None,
    ) -> None:
        """Runs `steps` to its end on virtual time, then calls done(value, exception).

        on_request(request) is asked before each request is run: an exception it returns is
        thrown into the steps there instead (an interrupt at that step)."""

        def advance(value: Any = None, error: Optional[BaseException] = None) -> None:
            try:
                request = steps.throw(error) if error is not None else steps.send(value)
            except StopIteration as stop:
                self.live.discard(steps)
                done(stop.value, None)
                return
            except BaseException as exc:
                self.live.discard(steps)
                done(None, exc)
                return
            if on_request is not None:
                interrupt = on_request(request)
                if interrupt is not None:
                    self.at(self.now, lambda: advance(None, interrupt))
                    return
            if type(request) is Pause:
                self.at(self.now + int(request.seconds * 1e9), advance)
            else:
                SimRound(self, link, request, lambda results: advance(results))

        self.live.add(steps)
        self.at(self.now, advance)

    def abandon(self) -> None:
        """Ends the steps still being driven (after a violation): each is thrown GeneratorExit
        until it ends (its clean-up requests are not run), so none is left to the collector."""
        for steps in self.live:
            for _ in range(10):
                try:
                    steps.throw(GeneratorExit)
                except BaseException:
                    break
        self.live.clear()
