"""asyncio locks: T = 1, 100, 1000 tasks on one event loop, each doing acquire+release cycles on
its own name, N = 1 and 5 masters (N=1 only for redis-py's single-instance Lock); the rate is the
aggregate over all tasks. Also redis-py's sync Lock with hiredis, a row of the single-cycle table
beside test_cycle.py's (pure-Python parser) one. The rows "hiredis" run in bench/.venv-hiredis's
worker process (see async_libs.py)."""

from __future__ import annotations

import os

import pytest
from async_libs import (
    ASYNC_LIBS,
    FLOOR_MAX_TASKS,
    HIREDIS_PYTHON,
    REMOTE,
    RemoteCycler,
    hiredis_parser,
    open_tasks,
)
from timing import bench_rounds

TASKS = (1, 100, 1000)
ROUND_S = 0.02  # a round's start and end (one future each, or a pipe round trip) over 20 ms
# A round of 1000 tasks' cycles can last seconds (pottery on N=5): such a row gets at least 3
# warm-up calls and 5 rounds (each already the mean of 1000 cycles), not 20 and 30.
SLOW = {"min_calls": 3, "min_rounds": 5}
ROWS = [
    (n, lib, t)
    for n in (1, 5)
    for lib, ns in ASYNC_LIBS.items()
    if n in ns
    for t in TASKS
    if lib != "aio-floor" or t <= FLOOR_MAX_TASKS
]


def parser_of(lib: str) -> str:
    if lib in REMOTE:
        if not os.access(HIREDIS_PYTHON, os.X_OK):
            pytest.skip(f"{HIREDIS_PYTHON} missing: `make bench` makes it")
        return "hiredis"
    if lib == "aio-floor":
        return "none"  # (no reply is parsed beyond a comparison of bytes)
    if lib.startswith("aio-"):
        return "hiredlock"
    if hiredis_parser():
        pytest.skip("hiredis is installed in this venv: no pure-Python parser rows")
    return "python"


def record(benchmark, cycler) -> None:
    benchmark.extra_info["failures"] = len(cycler.failures)
    benchmark.extra_info["failure_sample"] = cycler.failures[:3]
    info = getattr(cycler, "info", None)
    if info:
        benchmark.extra_info["worker"] = info


@pytest.mark.parametrize(
    ("n", "lib", "tasks"), ROWS, ids=[f"N{n}-{lib}-{t}tasks" for n, lib, t in ROWS]
)
def test_async(benchmark, ports, placement, key_prefix, n, lib, tasks):
    if lib.startswith("aio-"):
        pytest.importorskip("hiredlock.aio", reason="hiredlock.aio is not there yet")
    parser = parser_of(lib)
    benchmark.group = f"async N={n} {placement}"
    cycler = open_tasks(lib, ports[:n], tasks, key_prefix)
    try:
        bench_rounds(
            benchmark,
            cycler.run,
            tasks,
            {
                "kind": "async",
                "lib": lib,
                "n": n,
                "tasks": tasks,
                "parser": parser,
                "placement": placement,
            },
            round_s=ROUND_S,
            **SLOW,
        )
        record(benchmark, cycler)
    finally:
        cycler.close()


def test_sync_hiredis(benchmark, ports, placement, key_prefix):
    """redis-py's sync Lock (libs.RedisPyCycler) with hiredis, N=1, in the worker process."""
    lib = "redis-py-hiredis"
    parser = parser_of(lib)
    benchmark.group = f"cycle N=1 {placement}"
    cycler = RemoteCycler(lib, ports[:1], None, f"{key_prefix}:lock")
    try:
        bench_rounds(
            benchmark,
            cycler.run,
            1,
            {"kind": "cycle", "lib": lib, "n": 1, "parser": parser, "placement": placement},
            round_s=ROUND_S,
        )
        record(benchmark, cycler)
    finally:
        cycler.close()
