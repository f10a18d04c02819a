"""A master SIGSTOPped under threads or tasks sharing one client.

Threads sharing a Redlock while a master is stopped: once it resumes and runs what it had
buffered, no key of theirs is left there.  Each thread takes, extends and releases a lock of its
own while master 0 is stopped: the rounds time out on it and its commands wait in its socket
buffers. Two connections to one master are served in no promised order once it resumes, so a
lock's release must reach it on the connection its SET went out on; otherwise the release may run
first and the SET leave the key behind, with the holder's token, for its ttl.  The same for the
tasks of one AsyncRedlock.

hiredlock.aio with one master stopped: the other tasks' rounds end within their master_timeout,
they never wait for the stopped master to come back.  The stopped master is resumed by a timer
thread of the test RESUME_AFTER seconds after the tasks start (unless they are all done before);
every task notes whether the master was still stopped when it finished.  A round that waited for
the stopped master's answer could only end after that resume, so "finished while it was stopped"
is the check, not a duration.  A generous bound on each task's duration (many times the rounds'
timeouts) is checked as well.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time

import pytest
from aio_support import run_async  # noqa: F401  (the fixture)
from support import EXTRA_SLACK, urls, values, vote_for, wait_until

from hiredlock import Outcome
from hiredlock._engines import drain
from hiredlock.aio import AsyncRedlock

THREADS = 20
REPEATS = 4
TTL = 10.0  # far longer than the test: a leftover key is not hidden by its expiry
MASTER_TIMEOUT = 0.1


def cycles_in_threads(rl, names: list[str]) -> None:
    """Each name's lock taken, extended and released by a thread of its own, all at once."""
    errors: list[BaseException] = []
    start = threading.Barrier(len(names))

    def cycle(name: str) -> None:
        try:
            lock = rl.lock(name, TTL)
            start.wait()
            assert lock.acquire(blocking=False)
            lock.extend()
            lock.release()
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=cycle, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


def test_resumed_master_keeps_no_key_of_concurrent_threads(engine, make_redlock, masters5, key):
    stopped = masters5[0]
    leftovers = []
    for run in range(REPEATS):
        rl = make_redlock(urls(masters5), master_timeout=MASTER_TIMEOUT)
        warm = rl.lock(f"{key}:warm", TTL)  # every connection open before the stop
        assert warm.acquire(blocking=False)
        warm.release()
        names = [f"{key}:{run}:{i}" for i in range(THREADS)]
        stopped.stop()
        try:
            cycles_in_threads(rl, names)
        finally:
            stopped.cont()  # returns once the master has run every command it had buffered
        rl.close()
        left = [name for name in names if any(v is not None for v in values(masters5, name))]
        leftovers.append(len(left))
    assert not any(leftovers), f"names left on the resumed master in each run: {leftovers}"
    # (the resumed master ran them all and closed: the copies kept open are let go)
    wait_until(lambda: drain.kept() == 0, 10, "the half-closed connections let go")


# -- the tasks of one AsyncRedlock -----------------------------------------------------------------


TASKS = 20
# Long enough that no task can legitimately still be running then (each one makes 4 rounds of
# at most MASTER_TIMEOUT), short enough that a test waiting for the resume fails quickly.
RESUME_AFTER = 10.0 + EXTRA_SLACK
# A task makes 4 rounds; 2 s is 20 of their timeouts.
TASK_BOUND = 2.0 + EXTRA_SLACK


class Resumer:
    """Sends SIGCONT to a stopped master after `delay` seconds, or at cancel(); `resumed` is set
    right before the signal goes out."""

    def __init__(self, server, delay: float) -> None:
        self.server = server
        self.resumed = threading.Event()
        self._cancelled = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(delay,), daemon=True)
        self._thread.start()

    def _run(self, delay: float) -> None:
        self._cancelled.wait(delay)
        self.resumed.set()
        os.kill(self.server.pid, signal.SIGCONT)

    def cancel(self) -> None:
        self._cancelled.set()
        self._thread.join()


@pytest.mark.parametrize("connections", ["warm", "cold"])
def test_tasks_finish_while_a_master_is_stopped(
    engine,
    masters5,
    key,
    run_async,  # noqa: F811
    connections,
):
    """warm: the client's connections are open (and its scripts cached) before the stop, so what
    is checked is the rounds; cold: the master is stopped before the client's first round, so
    its connection's set-up (the kernel accepts it, nobody answers) is in every round too."""
    stopped = masters5[0]
    names = [f"{key}:{i}" for i in range(TASKS)]

    async def cycle(rl: AsyncRedlock, name: str, resumer: Resumer) -> dict:
        lock = rl.lock(name, TTL)
        t0 = time.monotonic()
        acquired = await lock.acquire(blocking=False)
        await lock.extend()
        states = await rl.inspect(name)
        await lock.release()
        return {
            "acquired": acquired,
            "states": states,
            "elapsed": time.monotonic() - t0,
            "while_stopped": not resumer.resumed.is_set(),
        }

    async def main() -> list[dict]:
        async with AsyncRedlock(
            urls(masters5), backend=engine, master_timeout=MASTER_TIMEOUT
        ) as rl:
            if connections == "warm":
                warm = rl.lock(key + ":warm", TTL)
                assert await warm.acquire(blocking=False)
                await warm.release()
            stopped.stop()
            resumer = Resumer(stopped, RESUME_AFTER)
            try:
                # Two waves: all tasks' rounds batched together, then each task alone in turn.
                first = await asyncio.gather(*(cycle(rl, n, resumer) for n in names))
                second = [await cycle(rl, n, resumer) for n in names[:5]]
            finally:
                resumer.cancel()
            return first + second

    results = run_async(main())
    stopped.cont()  # (already resumed by the Resumer; this waits until its buffer is processed)
    late = [r["elapsed"] for r in results if not r["while_stopped"]]
    assert not late, f"{len(late)} tasks finished only after the stopped master was resumed"
    slow = [round(r["elapsed"], 3) for r in results if r["elapsed"] > TASK_BOUND]
    assert not slow, f"tasks took longer than {TASK_BOUND}s: {slow}"
    for r in results:
        assert r["acquired"] is True
        assert len(r["states"]) == 5, r["states"]
        # The stopped master timed out, or was skipped as lagging; the others answered, ours.
        silent = vote_for(r["states"], stopped)
        assert silent.outcome in (Outcome.TIMEOUT, Outcome.SKIPPED), r["states"]
        answered = [s for s in r["states"] if s is not silent]
        assert all(s.outcome == Outcome.OK and s.exists and s.ours for s in answered), answered


# A run on the asyncio loop showed the bug this test was written for about half of the time
# (rounds of one lock on two connections to the stopped master, served out of order once it
# resumed): TASK_REPEATS runs make it show every time.
TASK_REPEATS = 8


def test_resumed_master_keeps_no_key_of_concurrent_tasks(
    engine,
    masters5,
    key,
    run_async,  # noqa: F811
):
    """The same cycles (acquire, extend, inspect, release) by TASKS tasks at once while master 0
    is stopped, and the client closed; resumed, it runs what it had buffered: every release must
    undo its SET there too, so no name is left on any master (their ttl is 10 s: a leftover is not
    hidden by expiry). The client's connection to it owes many replies when it closes (B8 in
    faults/known_bugs.py): it is half-closed and kept open until the master is done with it."""
    stopped = masters5[0]

    async def cycle(rl: AsyncRedlock, name: str) -> None:
        lock = rl.lock(name, TTL)
        assert await lock.acquire(blocking=False)
        await lock.extend()
        await rl.inspect(name)
        await lock.release()

    async def stopped_run(names: list[str]) -> None:
        async with AsyncRedlock(
            urls(masters5), backend=engine, master_timeout=MASTER_TIMEOUT
        ) as rl:
            warm = rl.lock(key + ":warm", TTL)
            assert await warm.acquire(blocking=False)
            await warm.release()
            stopped.stop()
            await asyncio.gather(*(cycle(rl, name) for name in names))

    leftovers = []
    for run in range(TASK_REPEATS):
        names = [f"{key}:{run}:{i}" for i in range(TASKS)]
        run_async(stopped_run(names))
        stopped.cont()  # returns once the master has run every command it had buffered
        left = [name for name in names if any(v is not None for v in values(masters5, name))]
        leftovers.append(len(left))
    assert not any(leftovers), f"names left on the resumed master in each run: {leftovers}"
    # (the resumed master ran them all and closed: the copies kept open are let go)
    wait_until(lambda: drain.kept() == 0, 10, "the half-closed connections let go")
