"""Clients and their lock lifetimes in one world, and the faults the world makes.

A lifetime: a new lock object of its kind (a mutex, a fenced mutex, a fair lock, a semaphore's
permit, a reader or a writer), an acquire (its attempts, retries and unlocks), a hold (maybe an
extend, maybe renewals, maybe a pause past the ttl), a release; an interrupt may be thrown into
its steps at any request. Every step is the library's own generator (hiredlock._core), driven by
World.drive.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any, Optional

import hiredlock
from hiredlock._core.errors import HiredlockError
from hiredlock._core.lock_steps import acquire_deadline
from hiredlock._core.requests import Cleanup

from .checks import Ledger
from .world import MS, Link, World

logging.getLogger("hiredlock").setLevel(logging.ERROR)  # (losses are outcomes here, not news)

KINDS = ("lock", "fenced", "fair", "semaphore", "rw")
FAULTS = ("loss", "slow", "stop", "crash", "volatile", "drift", "step", "pause", "interrupt")


class Interrupt(KeyboardInterrupt):
    """Thrown into the steps at a request: a Ctrl-C, a cancelled task."""


class Client:
    """One client (its own Redlock: its own session) running lifetimes one after another."""

    def __init__(self, sim: Sim, ident: int, name: bytes, kind: str) -> None:
        self.sim = sim
        world = sim.world
        rng = world.rng
        self.ident = ident
        self.name = name
        self.kind = kind
        self.redlock = hiredlock.Redlock(
            [f"redis://sim{i}:6379" for i in range(len(world.masters))],
            retry_delay=rng.choice((0.01, 0.02, 0.05)),
            retry_count=3,
            wake=False,
        )
        self.ttl = sim.ttls[name]
        self.owner = Link(world)
        self.renewer = Link(world)
        self.left = 0

    # -- one lifetime --------------------------------------------------------------------------

    def start(self, lifetimes: int) -> None:
        self.left = lifetimes
        self.next()

    def next(self) -> None:
        if self.left == 0:
            self.sim.ended += 1
            return
        self.left -= 1
        self.sim.started += 1
        world = self.sim.world
        self.sim.world.at(world.now + int(world.rng.uniform(0, 3) * MS), self.acquire)

    def steps_done(self, outcome: str) -> None:
        self.sim.outcomes[outcome] += 1

    def on_request(self, request: Any) -> Optional[BaseException]:
        sim = self.sim
        sim.ledger.request(request)
        sim.ledger.touched(self.name)
        if sim.interrupts and sim.world.rng.random() < sim.interrupts:
            sim.faults["interrupt"] += 1
            if type(request) is Cleanup:
                # a second interrupt, during the unlock the first one sent: it cuts that round
                # short, and the keys it did not reach expire with their ttl (README, "Interrupts
                # and fork"; an asyncio clean-up is shielded from a second cancellation)
                sim.ledger.lossy = True
            return Interrupt()
        return None

    def acquire(self) -> None:
        sim = self.sim
        rng = sim.world.rng
        redlock, name, ttl = self.redlock, self.name, self.ttl
        timeout = None if (self.kind == "fair" and not sim.ledger.faulty) else ttl * 3
        deadline = acquire_deadline(True, timeout, None)
        self.renews = self.kind in ("lock", "fenced", "rw") and rng.random() < 0.3
        if self.kind == "semaphore":
            sem = redlock.semaphore(name, sim.permits[name], ttl)
            steps = sem._acquire_steps(True, timeout)
        else:
            if self.kind == "rw":
                lock = redlock.rwlock(name, ttl)
                lock = lock.write() if rng.random() < 0.4 else lock.read()
            else:
                lock = redlock.lock(
                    name, ttl, fencing=self.kind == "fenced", fair=self.kind == "fair"
                )
            steps = lock._acquire_steps(True, deadline)
            self.lock = lock
        call = (name, self)
        first: list[int] = []

        def on_request(request: Any) -> Optional[BaseException]:
            if not first:
                first.append(sim.world.now)
                if self.kind == "fair":
                    sim.ledger.waiting[call] = (sim.world.now, 0)
            elif len(first) == 1 and self.kind == "fair" and call in sim.ledger.waiting:
                first.append(sim.world.now)
                sim.ledger.waiting[call] = (first[0], sim.world.now)
            return self.on_request(request)

        def done(value: Any, error: Optional[BaseException]) -> None:
            sim.ledger.waiting.pop(call, None) if error is not None or not value else None
            if error is not None:
                self.steps_done(f"acquire raised {type(error).__name__}")
                if not isinstance(error, (Interrupt, HiredlockError)):
                    raise error
                return self.next()
            if self.kind == "semaphore":
                value = value[0]
                if value is not None:
                    self.lock = value
            if not value:
                sim.ledger.waiting.pop(call, None)
                self.steps_done("not acquired")
                return self.next()
            if self.kind == "fair":
                sim.ledger.fair_granted(name, call)
            self.steps_done("acquired")
            sim.ledger.acquired(name, self.lock, self.kind == "fenced")
            self.hold()

        sim.world.drive(steps, self.owner, done, on_request)

    def hold(self) -> None:
        sim, lock = self.sim, self.lock
        world = sim.world
        rng = world.rng
        ttl_ns = int(self.ttl * 1e9)
        acquisition = lock._acquisition
        if self.renews:
            interval = lock._renew_interval_ns()
            hold = interval * rng.randint(1, 3) + int(rng.uniform(-1.5, 1.5) * MS)
            world.at(world.now + interval, lambda: self.renew(acquisition))
        else:
            hold = int(rng.uniform(0.0, 0.5) * ttl_ns)
        if sim.pauses and rng.random() < sim.pauses:
            sim.faults["pause"] += 1
            hold = int(ttl_ns * rng.uniform(1.0, 1.5))  # a GC pause past the ttl
        if not self.renews and rng.random() < 0.2:
            world.at(world.now + hold // 2, self.extend)
        world.at(world.now + hold, self.release)

    def extend(self) -> None:
        lock = self.lock
        try:
            timing = lock._extend_timing(None)
        except HiredlockError:
            return
        token = lock._token

        def done(value: Any, error: Optional[BaseException]) -> None:
            self.sim.ledger.touched(self.name)
            if error is None:
                self.steps_done("extended")
                if lock._token == token:
                    self.sim.ledger.watch_validity(self.name, lock)
            elif not isinstance(error, (Interrupt, HiredlockError)):
                raise error

        self.sim.world.drive(lock._extend_steps(timing), self.owner, done, self.on_request)

    def renew(self, acquisition: int) -> None:
        lock = self.lock
        token = lock._token

        def done(value: Any, error: Optional[BaseException]) -> None:
            self.sim.ledger.touched(self.name)
            if error is not None:
                if not isinstance(error, HiredlockError):
                    raise error
                return
            self.sim.outcomes["renewed" if value is not None else "renewal stopped"] += 1
            if lock._token == token and not lock._lost:
                self.sim.ledger.watch_validity(self.name, lock)
            if value is not None:
                self.sim.world.at(value, lambda: self.renew(acquisition))

        def on_request(request: Any) -> None:
            self.sim.ledger.request(request)

        self.sim.world.drive(lock._renew_steps(acquisition), self.renewer, done, on_request)

    def release(self) -> None:
        lock = self.lock

        def done(value: Any, error: Optional[BaseException]) -> None:
            self.sim.ledger.touched(self.name)
            if error is None:
                self.steps_done("released")
            elif isinstance(error, (Interrupt, HiredlockError)):
                self.steps_done(f"release raised {type(error).__name__}")
            else:
                raise error
            self.next()

        self.sim.world.drive(lock._release_steps(), self.owner, done, self.on_request)


class Sim:
    """One seed's world: its names, clients and faults."""

    def __init__(self, seed: int, lifetimes: int) -> None:
        self.world = world = World(seed, n_masters=3 + 2 * (seed % 2))
        self.ledger = ledger = Ledger(world)
        rng = world.rng
        self.outcomes: Counter[str] = Counter()
        self.faults: Counter[str] = Counter()
        self.started = self.ended = 0
        chosen = [f for f in FAULTS if rng.random() < 0.3] if rng.random() < 0.8 else []
        ledger.faulty = bool(chosen)
        self.interrupts = 0.02 if "interrupt" in chosen else 0.0
        self.pauses = 0.1 if "pause" in chosen else 0.0
        n_names = rng.randint(1, 3)
        kinds = [rng.choice(KINDS) for _ in range(n_names)]
        if "volatile" in chosen and "fenced" in kinds:
            chosen.remove("volatile")  # (fence counters need persistence: see README)
        self.chosen = chosen
        ledger.lossy = bool({"loss", "crash", "volatile"} & set(chosen))
        self.ttls: dict[bytes, float] = {}
        self.permits: dict[bytes, int] = {}
        self.clients: list[Client] = []
        for i, kind in enumerate(kinds):
            name = b"sim%d" % i
            self.ttls[name] = rng.choice((0.1, 0.2, 0.5, 1.0))
            self.permits[name] = rng.randint(1, 3)
            ledger.kinds[name] = (kind, self.permits[name])
            ledger.longest_ms = max(ledger.longest_ms, self.ttls[name] * 1000, 300)
        n_clients = rng.randint(2, 6)
        for c in range(n_clients):
            name = b"sim%d" % rng.randrange(n_names)
            self.clients.append(Client(self, c, name, ledger.kinds[name][0]))
        self.lifetimes = lifetimes
        self.longest_ns = int(ledger.longest_ms * MS)

    def faults_begin(self) -> None:
        world, rng, chosen = self.world, self.world.rng, self.chosen
        if "loss" in chosen:
            world.loss = rng.choice((0.01, 0.05, 0.15))
            self.faults["loss"] += 1
        if "slow" in chosen:
            world.slow, world.slow_ms = rng.choice((0.05, 0.2)), rng.choice((5.0, 20.0, 60.0))
            self.faults["slow"] += 1
        if "drift" in chosen:
            for master in world.masters:
                master.rate = 1.0 + rng.uniform(-0.008, 0.008)
            self.faults["drift"] += 1
        for fault in ("stop", "crash", "volatile", "step"):
            if fault in chosen:
                self.schedule(fault, rng.uniform(0, 0.3) * 1e9)

    def schedule(self, fault: str, after_ns: float) -> None:
        self.world.at(self.world.now + int(after_ns), lambda: self.fault(fault))

    def fault(self, fault: str) -> None:
        world, rng = self.world, self.world.rng
        if self.ended == len(self.clients):
            return
        master = rng.choice(world.masters)
        again = rng.uniform(0.05, 0.4) * 1e9
        if fault == "step":
            # within the documented drift (ttl * 0.01 + 2 ms, a rate of 0.8% taken): forward
            # 0.5 ms at most, once per longest ttl; backward any amount
            step = int(rng.uniform(-50, 0.5) * MS)
            master.step_clock(step)
            again = max(again, self.longest_ns * 1.1)
        elif master.state != "up":
            pass
        elif fault == "stop":
            master.state = "stopped"
            world.at(world.now + int(rng.uniform(1, 300) * MS), master.resume)
        elif fault == "crash":  # with persistence: the keys are there when it comes back
            master.state = "down"
            world.at(world.now + int(rng.uniform(1, 300) * MS), master.resume)
        else:  # without persistence: restarted empty, after the longest ttl (see README)
            master.state = "down"

            def restart() -> None:
                master.store.flushall()
                master.resume()

            world.at(world.now + int(self.longest_ns * 1.1), restart)
        self.faults[fault] += 1
        self.schedule(fault, again)

    def run(self) -> None:
        world = self.world
        try:
            with world.installed():
                self._run()
        except BaseException:
            world.abandon()
            raise

    def _run(self) -> None:
        world = self.world
        self.faults_begin()
        per = max(1, self.lifetimes // len(self.clients))
        for client in self.clients:
            client.start(per)
        world.run(until=lambda: self.ended == len(self.clients), limit_ns=world.now + 600 * 10**9)
        # every client ended: the faults stop, stopped masters answer, what is in flight lands
        world.loss = 0.0
        for master in world.masters:
            if master.state == "down" and "volatile" in self.chosen:
                master.store.flushall()
            if master.state != "up":
                master.resume()
        world.run()
        self.ledger.at_end()
