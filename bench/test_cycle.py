"""One acquire+release cycle on N = 1, 3, 5 masters: hiredlock's two engines, the C reference and
the peers that support that N (redis-py's Lock and python-redis-lock are single-instance: N=1)."""

from __future__ import annotations

import pytest
from libs import LIBS, open_cycle
from timing import bench_rounds

ROWS = [(n, lib) for n in (1, 3, 5) for lib, ns in LIBS.items() if n in ns]


@pytest.mark.parametrize(("n", "lib"), ROWS, ids=[f"N{n}-{lib}" for n, lib in ROWS])
def test_cycle(benchmark, ports, placement, key_prefix, n, lib):
    benchmark.group = f"cycle N={n} {placement}"
    cycler = open_cycle(lib, ports[:n], f"{key_prefix}:lock")
    try:
        bench_rounds(
            benchmark,
            cycler.run,
            1,
            {"kind": "cycle", "lib": lib, "n": n, "placement": placement},
        )
        benchmark.extra_info["failures"] = len(cycler.failures)
        benchmark.extra_info["failure_sample"] = cycler.failures[:3]
    finally:
        cycler.close()
