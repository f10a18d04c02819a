"""Handoff under contention: how long a released lock takes to reach its next holder.

8 waiters contend for ONE lock name, all in one process (8 threads; for the asyncio rows 8 tasks
of one event loop), each looping: blocking acquire, hold 1 ms, release, think uniform(0, 2 ms)
(so that the releaser does not always win its own lock back), for BENCH_HANDOFF_S seconds
(default 8) after a BENCH_HANDOFF_WARMUP_S (0.5) warm-up that is not counted. ttl 10 s.

Handoff latency, per release: from the moment release() was CALLED (time.monotonic_ns() taken
just before the call) to the moment the next acquire() RETURNED in any waiter (the releaser
included). Every acquisition records (t_acquired, t_release_called) in a shared list; after the
run they are sorted by t_acquired and each acquisition but the first has latency = its
t_acquired - the previous acquisition's t_release_called (bench/handoff_worker.py, `summarize`).
Reported: p50, p90, p99, max of that latency (nearest rank), acquisitions per second in the
window, acquisitions per waiter (smallest / largest: fairness), how often the releaser took the
lock back itself, the client process's CPU time, and exceptions by type (counted; the loop goes on).

Rows: hiredlock native with release notices (`wake`, the default), native with `wake=False` (the
randomised retry_delay timer only), the python engine waking, on N=5; python-redis-lock (BLPOP)
and redis-py's Lock (polls every 0.1 s, its default) on N=1; pottery's Redlock on N=5; and
hiredlock.aio native waking, native `wake=False`, python waking on N=5. The `wake=False` rows are
skipped while hiredlock has no `wake` argument; every row records whether it existed.

The waiters run in a worker process (bench/handoff_worker.py: a clean interpreter, and a hung run
is killed instead of hanging pytest). After it, the row's keys are listed on every master (what
the library left behind is recorded) and deleted; the test fails if any key of the row remains.
Unpinned placement only (BENCH_HANDOFF_PINNED=1 runs it pinned too).
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys

import pytest
from handoff_worker import ROWS
from libs import BENCH_DIR, HOST, TTL_S

WAITERS = 8
HOLD_MS = 1
THINK_MS = 2
SECONDS = float(os.environ.get("BENCH_HANDOFF_S", "8"))
WARMUP_S = float(os.environ.get("BENCH_HANDOFF_WARMUP_S", "0.5"))
WORKER = os.path.join(BENCH_DIR, "handoff_worker.py")


def wake_supported() -> bool:
    from hiredlock import Redlock

    return "wake" in inspect.signature(Redlock).parameters


def leftovers(ports, row: str, name: str) -> dict[str, int]:
    """Keys of this row still on the masters (key -> pttl in ms), then deleted."""
    from redis import Redis

    found: dict[str, int] = {}
    for port in ports:
        client = Redis(host=HOST, port=port)
        try:
            for key in client.scan_iter(count=1000):
                text = key.decode(errors="replace")
                if name in text:
                    found[f"{port}/{text}"] = client.pttl(key)
                    client.delete(key)
        finally:
            client.close()
    return found


def worker_cfg(
    row: str, ports: list[int], name: str, waiters: int, hold_ms: float, think_ms: float, **more
) -> dict:
    """The handoff worker's configuration for one run (`more`: seed, start_at, events_out)."""
    return {
        "row": row,
        "ports": ports,
        "name": name,
        "seconds": SECONDS,
        "warmup_s": WARMUP_S,
        "waiters": waiters,
        "hold_ms": hold_ms,
        "think_ms": think_ms,
        "ttl_s": TTL_S,
        "seed": 1,
        **more,
    }


def start_worker(cfg: dict) -> subprocess.Popen:
    """bench/handoff_worker.py on `cfg`, in a clean interpreter (hiredlock's engine unforced)."""
    env = dict(os.environ)
    env.pop("HIREDLOCK_IMPL", None)
    return subprocess.Popen(
        [sys.executable, WORKER, json.dumps(cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        cwd=BENCH_DIR,
    )


@pytest.mark.parametrize("row", list(ROWS))
def test_handoff(ports, placement, recorder, key_prefix, row):
    if placement == "pinned" and not os.environ.get("BENCH_HANDOFF_PINNED"):
        pytest.skip("handoff is measured in the unpinned placement")
    api, lib, n, wake = ROWS[row]
    has_wake = wake_supported()
    if wake is not None and not has_wake:
        pytest.skip("hiredlock has no `wake` argument yet")
    if api == "async":
        pytest.importorskip("hiredlock.aio")
    name = f"{key_prefix}:one-name"
    proc = start_worker(worker_cfg(row, ports[:n], name, WAITERS, HOLD_MS, THINK_MS))
    try:
        out, err = proc.communicate(timeout=WARMUP_S + SECONDS + 120)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"{row}: the worker hung; killed:\n{err.decode()[-2000:]}")
    finally:
        left = leftovers(ports[:n], row, name)
    assert proc.returncode == 0, f"{row} worker failed:\n{err.decode()[-2000:]}"
    result = json.loads(out.decode().strip().splitlines()[-1])
    recorder.add(
        kind="handoff",
        lib=row,
        api=api,
        library=lib,
        n=n,
        wake=wake,
        wake_supported=has_wake,
        waiters=WAITERS,
        hold_ms=HOLD_MS,
        think_ms=THINK_MS,
        seconds=SECONDS,
        warmup_s=WARMUP_S,
        leftover_keys=left,
        **result,
    )
    # Whatever the library left (python-redis-lock's signal key lives 1 s) was deleted above.
    assert not leftovers(ports[:n], row, name), "keys left after cleanup"
    assert result["acquisitions"] > 0, f"{row}: no acquisition in {SECONDS} s"
    assert result["overlaps"] == 0, f"{row}: a waiter acquired before the holder released"
