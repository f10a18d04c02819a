"""Heavy contention: many waiters of several processes on ONE lock name.

2 processes, each with W waiters (200 tasks of one event loop for the asyncio rows, 16 threads for
the sync ones), every waiter with a lock object of its own, looping as the handoff benchmark's do
(bench/handoff_worker.py) with nothing held nor thought: blocking acquire, release, on N=5,
for BENCH_HANDOFF_S seconds (default 8) after the warm-up. The processes start together
(`start_at`); their acquisitions are merged on the monotonic clock (one clock for every process of
the machine), and the handoff latency is computed over the merge as in the handoff benchmark.
Reported: acquisitions per second (both processes), each process's share, the waiters served
(acquired at least once) out of all, handoff p50/p99, exceptions by type.

Unpinned placement only (BENCH_HANDOFF_PINNED=1 runs it pinned too).
"""

from __future__ import annotations

import json
import os
import tempfile
import time

import pytest
from handoff_worker import summarize
from test_handoff import SECONDS, WARMUP_S, leftovers, start_worker, worker_cfg

PROCESSES = 2
# row -> waiters per process
HERD_ROWS = {"aio-native": 200, "aio-python": 200, "native": 16, "python": 16}
N = 5
HOLD_MS = THINK_MS = 0  # (`with lock: pass` in a loop)


@pytest.mark.parametrize("row", list(HERD_ROWS))
def test_herd(ports, placement, recorder, key_prefix, row):
    if placement == "pinned" and not os.environ.get("BENCH_HANDOFF_PINNED"):
        pytest.skip("contention is measured in the unpinned placement")
    waiters = HERD_ROWS[row]
    name = f"{key_prefix}:one-name"
    start_at = time.time() + 3.0  # every process connected and its waiters parked by then
    with tempfile.TemporaryDirectory() as tmp:
        procs = [
            start_worker(
                worker_cfg(
                    row,
                    ports[:N],
                    name,
                    waiters,
                    HOLD_MS,
                    THINK_MS,
                    seed=p + 1,
                    start_at=start_at,
                    events_out=os.path.join(tmp, f"events-{p}.json"),
                )
            )
            for p in range(PROCESSES)
        ]
        results, merged, windows = [], [], []
        try:
            for p, proc in enumerate(procs):
                out, err = proc.communicate(timeout=3 + WARMUP_S + SECONDS + 120)
                assert proc.returncode == 0, f"{row} worker failed:\n{err.decode()[-2000:]}"
                results.append(json.loads(out.decode().strip().splitlines()[-1]))
                with open(os.path.join(tmp, f"events-{p}.json")) as f:
                    dumped = json.load(f)
                windows.append(dumped["window"])
                merged += [(t_acq, t_rel, p * waiters + w) for t_acq, t_rel, w in dumped["events"]]
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
            left = leftovers(ports[:N], row, name)
    window = (max(w[0] for w in windows), min(w[1] for w in windows))
    both = summarize(merged, window[0], window[1], waiters * PROCESSES)
    per_waiter = both.pop("per_waiter")
    shares = [sum(per_waiter[p * waiters : (p + 1) * waiters]) for p in range(PROCESSES)]
    errors: dict[str, int] = {}
    for result in results:
        for what, count in result["errors"].items():
            errors[what] = errors.get(what, 0) + count
    recorder.add(
        kind="herd",
        lib=row,
        n=N,
        processes=PROCESSES,
        waiters=waiters,
        seconds=(window[1] - window[0]) / 1e9,
        per_s=both["acquisitions"] / ((window[1] - window[0]) / 1e9),
        process_shares=[s / max(1, sum(shares)) for s in shares],
        served=sum(1 for count in per_waiter if count),
        errors=errors,
        leftover_keys=left,
        **both,
    )
    assert not leftovers(ports[:N], row, name), "keys left after cleanup"
    assert both["overlaps"] == 0, f"{row}: a waiter acquired before the holder released"
