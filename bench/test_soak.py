"""Soak: 1,000,000 native acquire+release cycles on N=5; RSS must grow by less than 2 MB and no file
descriptor may leak (nor any server-side connection). Not in the default run:

    .venv/bin/python -m pytest bench/test_soak.py -m soak -o faulthandler_timeout=0

BENCH_SOAK_CYCLES (default 1000000) and BENCH_SOAK_N (default 5) change the size. The RSS is read
after a warm-up (connections, script caches, allocator arenas) and then every 10% of the run; the
progression lands in results/soak-<placement>.json.
"""

from __future__ import annotations

import gc
import json
import os
import time

import pytest
from libs import open_cycle

CYCLES = int(os.environ.get("BENCH_SOAK_CYCLES", "1000000"))
N = int(os.environ.get("BENCH_SOAK_N", "5"))
WARMUP = 20000
MAX_RSS_GROWTH = 2 * 1024 * 1024


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def server_clients(masters) -> list[int]:
    return [len(srv.foreign_clients()) for srv in masters]


@pytest.mark.soak
def test_soak_native(masters, ports, placement, key_prefix):
    from conftest import RESULTS_DIR

    cycler = open_cycle("native", ports[:N], f"{key_prefix}:lock")
    try:
        cycler.run(WARMUP)
        clients0 = server_clients(masters[:N])  # opens the admin connections before fds are counted
        gc.collect()
        rss0, fds0 = rss_bytes(), open_fds()
        t0 = time.perf_counter()
        points = [(0, rss0)]
        step = max(1, CYCLES // 10)
        done = 0
        while done < CYCLES:
            k = min(step, CYCLES - done)
            cycler.run(k)
            done += k
            points.append((done, rss_bytes()))
        elapsed = time.perf_counter() - t0
        gc.collect()
        rss1, fds1, clients1 = rss_bytes(), open_fds(), server_clients(masters[:N])
    finally:
        cycler.close()
    summary = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "placement": placement,
        "cycles": CYCLES,
        "n": N,
        "seconds": elapsed,
        "us_per_cycle": elapsed / CYCLES * 1e6,
        "rss_start": rss0,
        "rss_end": rss1,
        "rss_growth": rss1 - rss0,
        "rss_points": points,
        "fds_start": fds0,
        "fds_end": fds1,
        "server_clients_start": clients0,
        "server_clients_end": clients1,
    }
    os.makedirs(RESULTS_DIR, exist_ok=True)
    with open(os.path.join(RESULTS_DIR, f"soak-{placement}.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(
        f"\nsoak: {CYCLES} cycles N={N} in {elapsed:.1f} s "
        f"({summary['us_per_cycle']:.1f} us each); "
        f"RSS {rss0 / 2**20:.2f} -> {rss1 / 2**20:.2f} MiB; fds {fds0} -> {fds1}; "
        f"server clients {clients0} -> {clients1}"
    )
    assert rss1 - rss0 < MAX_RSS_GROWTH, summary
    assert fds1 == fds0, summary
    assert clients1 == clients0, summary
