"""Client CPU per cycle: user+sys time of this (the client) process over a fixed number of cycles.

Servers run in their own processes, so on loopback this is the client's own cost, whatever the
placement; the C reference runs in this process too (one ctypes call for all the cycles). Each
measurement is repeated REPEATS times and the median kept. Recorded in results/extra-*.json.
"""

from __future__ import annotations

import os
import resource
import statistics
import time

import pytest
from libs import LIBS, open_cycle

REPEATS = 3
CYCLES = int(os.environ.get("BENCH_CPU_CYCLES", "10000"))  # ours and the C reference
PEER_CYCLES = max(1, CYCLES // 10)  # the peers are 3 to 50 times slower
ROWS = [(n, lib) for n in (1, 5) for lib, ns in LIBS.items() if n in ns]


def cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


@pytest.mark.parametrize(("n", "lib"), ROWS, ids=[f"N{n}-{lib}" for n, lib in ROWS])
def test_cpu(ports, placement, recorder, key_prefix, n, lib):
    cycles = CYCLES if lib in ("native", "python", "cref") else PEER_CYCLES
    cycler = open_cycle(lib, ports[:n], f"{key_prefix}:lock")
    try:
        cycler.run(max(100, cycles // 10))  # warm-up: connections, script caches
        cpu, wall = [], []
        for _ in range(REPEATS):
            c0, w0 = cpu_s(), time.perf_counter()
            cycler.run(cycles)
            c1, w1 = cpu_s(), time.perf_counter()
            cpu.append((c1 - c0) / cycles)
            wall.append((w1 - w0) / cycles)
    finally:
        cycler.close()
    recorder.add(
        kind="cpu",
        lib=lib,
        n=n,
        cycles=cycles,
        repeats=REPEATS,
        cpu_s_per_cycle=statistics.median(cpu),
        cpu_all=cpu,
        wall_s_per_cycle=statistics.median(wall),
        failures=len(cycler.failures),
    )
