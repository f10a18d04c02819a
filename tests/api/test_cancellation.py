"""Cancelling hiredlock.aio's acquire, release and extend at random points, while masters are
slowed so that rounds are in flight: no key is left behind, and the client's connections stay in
step (the next round gets its own replies).

RUNS runs per engine and loop (200 in all), seeded (HIREDLOCK_TEST_SEED replays one).  A run:
1. picks an operation (acquire, release or extend), how its task is interrupted (task.cancel()
   after a random delay, or asyncio.timeout() with a random delay inside the task), and how
   masters are slowed (one or two SIGSTOPped, or one or two in DEBUG SLEEP); an acquire may also
   meet a foreign holder on a majority for a few ms, so that it retries (rounds and pauses);
2. runs the operation in a task and interrupts it; the outcome must be a sound one: a cancelled
   acquire holds nothing, a release (cancelled or not) let go, a cancelled extend still holds the
   lock (then it is released);
3. resumes the masters, and waits until every master has run what it had buffered; then no
   master holds anything of ours for the name (a foreign holder's key, expiring, may remain);
4. on the same AsyncRedlock, acquires a fresh name: every master holds this lock's token, and
   inspect() reports it as ours everywhere and the interrupted name as not ours.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time

import pytest
from aio_support import run_async  # noqa: F401  (the fixture)
from support import EVENTUAL, FOREIGN, debug_sleep, urls, values

from hiredlock import HiredlockError, Outcome
from hiredlock.aio import AsyncRedlock

RUNS = 50  # per engine and loop: 200 in all
SEED = int(os.environ.get("HIREDLOCK_TEST_SEED", "20261124"))
MASTER_TIMEOUT = 0.05
TTL = 10.0  # long: a key left behind is seen, not hidden by its expiry
MAX_DELAY = 0.08  # the interruption comes 0-80 ms after the operation starts
INTERRUPTED = (asyncio.CancelledError, TimeoutError)


def case_seed(engine: str, loop: str) -> int:
    return SEED * 4 + ["native", "python"].index(engine) * 2 + ["asyncio", "uvloop"].index(loop)


def nothing_of_ours(servers, name: str, timeout: float = EVENTUAL) -> list:
    """Waits until no master holds a value for `name` other than the foreign holder's; returns
    what they hold then (polls: unlocks sent to masters beyond the quorum may still be on their
    way)."""
    deadline = time.monotonic() + timeout
    while True:
        vals = values(servers, name)
        if all(v is None or v == FOREIGN for v in vals) or time.monotonic() > deadline:
            return vals
        time.sleep(0.002)


class Slowdown:
    """One or two masters SIGSTOPped, or in DEBUG SLEEP, until resume()."""

    def __init__(self, servers, rng: random.Random) -> None:
        self.kind = rng.choice(["stop", "sleep"])
        self.slowed = rng.sample(servers, rng.choice([1, 2]))
        self.sockets = []
        if self.kind == "stop":
            for srv in self.slowed:
                srv.stop()
        else:
            # at least 0.1 s: debug_sleep checks that each sleep is running, one after another
            self.sockets = debug_sleep(self.slowed, round(rng.uniform(0.1, 0.2), 3))

    def resume(self) -> None:
        """Returns once every slowed master has run all it had buffered."""
        if self.kind == "stop":
            for srv in self.slowed:
                srv.cont()
        else:
            for srv in self.slowed:
                srv.admin().ping()  # answered once the sleep is over
                srv.admin().ping()  # (read in a later event-loop iteration: see cont())
            for sock in self.sockets:
                sock.close()

    def __str__(self) -> str:
        return f"{self.kind} {[srv.port for srv in self.slowed]}"


async def one_run(
    rl: AsyncRedlock, servers, name: str, rng: random.Random, interrupted_ops: list[str]
) -> list[str]:
    """One interrupted operation and the checks after it; returns the problems seen, and appends
    the operation to `interrupted_ops` when the interruption cut it short."""
    op = rng.choice(["acquire", "release", "extend"])
    how = rng.choice(["cancel", "timeout"])
    delay = rng.uniform(0, MAX_DELAY)
    foreign = op == "acquire" and rng.random() < 0.5
    lock = rl.lock(name, TTL)
    if op != "acquire":
        assert await lock.acquire(blocking=False), "setting up: the lock was not acquired"
    if foreign:  # a holder of a majority for 10-60 ms: the acquire retries meanwhile
        held_ms = rng.randrange(10, 60)
        for srv in servers[:3]:
            srv.admin().set(name, FOREIGN, px=held_ms)
    slowdown = Slowdown(servers, rng)
    what = f"{op} interrupted by {how} after {delay * 1e3:.1f} ms, {slowdown}, foreign={foreign}"
    problems = []

    async def operation():
        if op == "acquire":
            return await lock.acquire(blocking=True, timeout=2)
        return await getattr(lock, op)()

    async def with_timeout():
        async with asyncio.timeout(delay):
            return await operation()

    if how == "cancel":
        task = asyncio.create_task(operation())
        await asyncio.sleep(delay)
        task.cancel()
    else:
        task = asyncio.create_task(with_timeout())
    try:
        (outcome,) = await asyncio.gather(task, return_exceptions=True)
        interrupted = isinstance(outcome, INTERRUPTED)
        if interrupted:
            interrupted_ops.append(op)
        if not interrupted and isinstance(outcome, BaseException):
            problems.append(f"{what}: raised {outcome!r}")
        elif op == "acquire" and interrupted and (lock.held or lock.token is not None):
            problems.append(f"{what}: a cancelled acquire holds the lock")
        elif op == "release" and lock.held:
            problems.append(f"{what}: still held after release ({outcome!r})")
        elif op == "extend" and not lock.held:
            problems.append(f"{what}: an extend ({outcome!r}) let the lock go")
        if lock.held:  # acquired before the interruption, or an extend's lock: released now
            try:
                await lock.release()
            except HiredlockError as exc:
                problems.append(f"{what}: releasing afterwards failed: {exc!r}")
    finally:
        slowdown.resume()
    left = nothing_of_ours(servers, name)
    if not all(v is None or v == FOREIGN for v in left):
        problems.append(f"{what}: left on the masters: {left}")

    # The next round on the same client gets its own replies.
    fresh = rl.lock(name + ":next", TTL)
    if not await fresh.acquire(blocking=False):
        return [*problems, f"{what}: the next acquire failed: {fresh.last_votes}"]
    token = fresh.token.encode()
    deadline = time.monotonic() + EVENTUAL
    while (vals := values(servers, fresh.key)) != [token] * len(servers):
        if time.monotonic() > deadline:
            problems.append(f"{what}: the next lock's token is not on every master: {vals}")
            break
        time.sleep(0.002)
    states = await rl.inspect(fresh.name)
    if not all(s.outcome == Outcome.OK and s.exists and s.ours for s in states):
        problems.append(f"{what}: inspect() of the next lock: {states}")
    states = await rl.inspect(name)
    if any(s.outcome != Outcome.OK or s.ours for s in states):
        problems.append(f"{what}: inspect() of the interrupted name: {states}")
    await fresh.release()
    left = nothing_of_ours(servers, fresh.key)
    if any(v is not None for v in left):
        problems.append(f"{what}: the next lock's key left after its release: {left}")
    return problems


@pytest.mark.each_value_once
def test_interrupted_operations_leave_nothing(engine, masters5, key, run_async):  # noqa: F811
    seed = case_seed(engine, run_async.kind)
    rng = random.Random(seed)

    interrupted_ops: list[str] = []

    async def main() -> list[str]:
        problems = []
        async with AsyncRedlock(
            urls(masters5), backend=engine, master_timeout=MASTER_TIMEOUT, retry_delay=0.01
        ) as rl:
            for i in range(RUNS):
                run_problems = await one_run(rl, masters5, f"{key}:{i}", rng, interrupted_ops)
                problems.extend(f"run {i}: {p}" for p in run_problems)
        return problems

    try:
        problems = run_async(main())
    finally:
        for srv in masters5:  # a failed run may have left one stopped
            if srv.stopped:
                with contextlib.suppress(Exception):
                    srv.cont()
    assert not problems, f"seed {seed} (HIREDLOCK_TEST_SEED={SEED}): {problems[:10]}"
    # The interruptions did land inside each kind of operation (not only after it ended).
    counts = {op: interrupted_ops.count(op) for op in ("acquire", "release", "extend")}
    assert all(counts.values()), f"operations cut short by the interruption: {counts}"


BATCH = 30


def test_cancelled_callers_of_one_batch(engine, masters5, key, run_async):  # noqa: F811
    """BATCH tasks ask for their own names in one loop iteration (one batch); a third of them are
    cancelled in that same iteration (before their request can go out), a third one iteration
    later (their request is out).  The cancelled hold nothing and leave no key; every survivor
    got its own slice of the batch's results: it holds its lock, with its own token on every
    master, and the next batch of the same client is answered right."""
    names = [f"{key}:{i}" for i in range(BATCH)]

    async def main() -> dict:
        async with AsyncRedlock(urls(masters5), backend=engine) as rl:
            locks = [rl.lock(name, TTL) for name in names]
            tasks = [asyncio.create_task(lock.acquire(blocking=False)) for lock in locks]
            await asyncio.sleep(0)  # every task has asked for its round
            for task in tasks[0::3]:
                task.cancel()
            await asyncio.sleep(0)
            for task in tasks[1::3]:
                task.cancel()
            outcomes = await asyncio.gather(*tasks, return_exceptions=True)
            held = [lock.held for lock in locks]
            tokens = [lock.token for lock in locks]
            survivors = [lock for lock, o in zip(locks, outcomes) if o is True]
            after = {}  # what the masters hold while the survivors hold their locks
            for lock, outcome in zip(locks, outcomes):
                if outcome is True:
                    after[lock.name] = values(masters5, lock.name)
                else:  # (polled: an unlock to a master beyond the quorum may be on its way)
                    after[lock.name] = nothing_of_ours(masters5, lock.name)
            states = [await rl.inspect(lock.name) for lock in survivors]
            await rl.release_many(survivors)
            return {
                "outcomes": outcomes,
                "held": held,
                "tokens": tokens,
                "after": after,
                "states": states,
            }

    out = run_async(main())
    outcomes = out["outcomes"]
    assert all(o is True or isinstance(o, asyncio.CancelledError) for o in outcomes), outcomes
    assert all(o is True for o in outcomes[2::3]), "a task that was not cancelled failed"
    cancelled = [i for i, o in enumerate(outcomes) if o is not True]
    assert set(range(0, BATCH, 3)) <= set(cancelled), "a task cancelled before its round acquired"
    for i, name in enumerate(names):
        vals = values(masters5, name)
        if i in cancelled:
            assert not out["held"][i] and out["tokens"][i] is None
            assert out["after"][name] == [None] * 5, f"{name} (cancelled): {out['after'][name]}"
        else:
            assert out["held"][i], name
            expected = [out["tokens"][i].encode()] * 5
            assert out["after"][name] == expected, f"{name}: {out['after'][name]} != its token"
        assert vals == [None] * 5, f"{name} left after the survivors' release: {vals}"
    for states in out["states"]:
        assert all(s.outcome == Outcome.OK and s.exists and s.ours for s in states), states
