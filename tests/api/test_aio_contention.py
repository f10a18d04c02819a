"""Mutual exclusion on hiredlock.aio under heavy contention: 1,000 tasks in 2 processes (500 tasks
of one AsyncRedlock each, one process on the asyncio loop and the other on uvloop) all want ONE
lock name, each acquiring it once with a blocking acquire (tests/support/aio_contention_worker.py).

Oracles, none of them trusting the library:
* occupancy: every critical section INCRs a counter on a judge server (a redis-server that is not
  one of the masters) on entry and DECRs it on exit; an entry that finds it above 1 is an overlap;
* lost update: each section reads a counter on the judge and writes it back plus one, so the
  final count is the number of sections only if no two ran at once;
* intervals: every holder's [acquired_at, min(released_at, valid_until)] on CLOCK_MONOTONIC (one
  clock for both processes): no two of different tokens overlap (faults.oracles).
Every task must have acquired exactly once, and nothing else may have been raised.

retry_delay is short (20 ms: a waiting task retries every 10-30 ms), so hundreds of attempts
per second from each process meet the holder's (one batched round per loop iteration), yet the
run stays within seconds on two shared cores.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from faults.oracles import interval_violations
from support import EXTRA_SLACK, SUPPORT_DIR, assert_no_key, urls

WORKER = os.path.join(SUPPORT_DIR, "aio_contention_worker.py")
TASKS_PER_PROCESS = 500
LOOPS = ("asyncio", "uvloop")  # one process on each
TTL = 10.0  # no section comes near it: validity never ends a holder's interval early
RETRY_DELAY = 0.02
TIMEOUT = 120 + EXTRA_SLACK  # both processes end well within it; past it they are stuck


def run_workers(tmp_path, loops, **config) -> list[dict]:
    """One aio_contention_worker process per loop kind in `loops`, started together with the
    same config; their results, in that order."""
    start_at = time.monotonic_ns() + 1_500_000_000  # every process has imported by then
    procs, results = [], []
    for i, loop in enumerate(loops):
        cfg = {
            **config,
            "loop": loop,
            "start_at_ns": start_at,
            "label": f"p{i}-{loop}",
            "results": str(tmp_path / f"p{i}.json"),
        }
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([SUPPORT_DIR, *sys.path])}
        procs.append(
            subprocess.Popen(
                [sys.executable, WORKER, json.dumps(cfg)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
        )
    try:
        for proc in procs:
            output, _ = proc.communicate(timeout=TIMEOUT)
            assert proc.returncode == 0, output.decode(errors="replace")[-3000:]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for i in range(len(loops)):
        with open(tmp_path / f"p{i}.json") as f:
            results.append(json.load(f))
    return results


def test_thousand_tasks_one_name_two_processes(engine, masters5, redis_factory, key, tmp_path):
    (judge,) = redis_factory(1)
    results = run_workers(
        tmp_path,
        LOOPS,
        masters=urls(masters5),
        engine=engine,
        name=key,
        ttl=TTL,
        retry_delay=RETRY_DELAY,
        tasks=TASKS_PER_PROCESS,
        judge=judge.url,
    )
    assert [r["loop"].split(".")[0] for r in results] == list(LOOPS)
    for r in results:
        assert r["errors"] == [], r["errors"][:5]
        assert r["acquired"] == TASKS_PER_PROCESS
        assert r["threads"] == 1, "the async API started a thread"
    assert sum(r["overlaps"] for r in results) == 0, "two holders were in the section at once"
    total = TASKS_PER_PROCESS * len(LOOPS)
    assert int(judge.admin().get(key + ":counter")) == total, "a lost update: sections overlapped"
    intervals = [iv for r in results for iv in r["intervals"]]
    assert len(intervals) == total
    assert len({iv[1] for iv in intervals}) == total, "two acquisitions share a token"
    overlapping = interval_violations(intervals)
    assert not overlapping, f"{len(overlapping)} overlapping holders, e.g. {overlapping[:2]}"
    assert_no_key(masters5, key)


def test_the_oracles_see_sections_run_without_the_lock(masters5, redis_factory, key, tmp_path):
    """The negative control: the same workers with the lock left out (50 tasks in each process)
    are caught by the occupancy oracle and the lost-update counter."""
    (judge,) = redis_factory(1)
    tasks = 50
    results = run_workers(
        tmp_path,
        LOOPS,
        masters=urls(masters5),
        engine="python",
        name=key,
        ttl=TTL,
        retry_delay=RETRY_DELAY,
        tasks=tasks,
        judge=judge.url,
        use_lock=False,
    )
    assert all(r["errors"] == [] for r in results), results
    assert sum(r["overlaps"] for r in results) > 0
    assert int(judge.admin().get(key + ":counter")) < tasks * len(LOOPS)
