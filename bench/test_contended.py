"""Contention: 4 processes, one name, N=5, 10 s; acquisitions per second and their spread.

Each process loops a blocking acquire (each library's own retry policy: hiredlock and redlock-ng
sleep 0.1 to 0.3 s between tries, pottery 0 to 0.2 s) and an immediate release. What it shows:
the total rate, and how evenly the processes share the lock (min/max per process).
Run in the unpinned placement only (BENCH_CONTENDED_PINNED=1 runs it pinned too);
BENCH_CONTENDED_S sets the duration.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time

import pytest
from libs import BENCH_DIR, TTL_S

PROCESSES = 4
N = 5
SECONDS = float(os.environ.get("BENCH_CONTENDED_S", "10"))
NG_PYTHON = os.environ.get(
    "BENCH_REDLOCK_NG_PYTHON", os.path.join(BENCH_DIR, ".venv-redlock-ng", "bin", "python")
)
WORKER = os.path.join(BENCH_DIR, "contend_worker.py")


def interpreter(lib: str) -> str:
    if lib != "redlock-ng":
        return sys.executable
    if not os.access(NG_PYTHON, os.X_OK):
        pytest.skip(f"redlock-ng: no venv at {NG_PYTHON} (make bench makes it from PyPI)")
    probe = subprocess.run(
        [NG_PYTHON, "-c", "import redlock; redlock.RedlockConfig"], capture_output=True
    )
    if probe.returncode:
        pytest.skip(f"redlock-ng does not import in {NG_PYTHON}: {probe.stderr.decode()[-300:]}")
    return NG_PYTHON


@pytest.mark.parametrize("lib", ["native", "python", "pottery", "redlock-ng"])
def test_contended(ports, placement, recorder, key_prefix, lib):
    if placement == "pinned" and not os.environ.get("BENCH_CONTENDED_PINNED"):
        pytest.skip("contention is measured in the unpinned placement")
    python = interpreter(lib)
    cfg = {
        "lib": lib,
        "ports": ports[:N],
        "name": f"{key_prefix}:one-name",
        "seconds": SECONDS,
        "ttl_ms": TTL_S * 1000,
        "start_at": time.time() + 2.0,  # every process connected and waiting by then
    }
    env = dict(os.environ)
    env.pop("HIREDLOCK_IMPL", None)
    procs = [
        subprocess.Popen(
            [python, WORKER, json.dumps(cfg)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=BENCH_DIR,
        )
        for _ in range(PROCESSES)
    ]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=SECONDS + 60)
        assert proc.returncode == 0, f"{lib} worker failed:\n{err.decode()[-2000:]}"
        results.append(json.loads(out.decode().strip().splitlines()[-1]))
    counts = [r["count"] for r in results]
    total = sum(counts)
    recorder.add(
        kind="contended",
        lib=lib,
        n=N,
        processes=PROCESSES,
        seconds=SECONDS,
        counts=counts,
        total=total,
        per_s=total / SECONDS,
        min_share=min(counts) / total if total else 0.0,
        max_share=max(counts) / total if total else 0.0,
        cv=statistics.pstdev(counts) / statistics.mean(counts) if total else 0.0,
        cpu_s=[r["cpu_s"] for r in results],
        errors=[r["errors"] for r in results],
    )
    assert total > 0, f"{lib}: no acquisition in {SECONDS} s"
