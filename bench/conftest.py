"""Fixtures of the benchmark suite (bench/): one set of five real redis-servers per run, shared by
every row; the placement (pinned to CPU 0 or not) the run was started in; a side file for the
measurements that are not latencies (CPU per cycle, contention).

`make bench` runs this suite twice through bench/run.py (pinned, then unpinned) and merges both
into bench/results/REPORT.md. By hand:

    taskset -c 0 .venv/bin/python -m pytest bench      # pinned: client and servers on CPU 0
    .venv/bin/python -m pytest bench                    # unpinned (default scheduling)
    .venv/bin/python -m pytest bench -m soak            # the 1,000,000-cycle soak (not by default)
"""

from __future__ import annotations

import json
import os
import sys
import time

import pytest

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH_DIR)
sys.path.insert(0, BENCH_DIR)
# servers.py (redis-servers started as the tests do) and tls_support.py: the tests' helpers
sys.path.insert(1, os.path.join(ROOT, "tests", "support"))

from servers import RedisServer  # noqa: E402

RESULTS_DIR = os.environ.get("BENCH_RESULTS_DIR", os.path.join(BENCH_DIR, "results"))
N_MASTERS = 5


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "soak: 1,000,000-cycle leak check (run with -m soak; not in the default run)"
    )


def pytest_collection_modifyitems(config, items):
    if "soak" in (config.getoption("-m") or ""):
        return
    skip = pytest.mark.skip(reason="soak test: run with -m soak")
    for item in items:
        if "soak" in item.keywords:
            item.add_marker(skip)


# -- placement ------------------------------------------------------------------------------------


def current_placement() -> str:
    """'pinned' when this process may run on one CPU only, else 'unpinned'.

    BENCH_PLACEMENT (set by bench/run.py) must agree with the real affinity: a run labelled
    pinned that is not would put wrong numbers in the report.
    """
    cpus = os.sched_getaffinity(0)
    actual = "pinned" if len(cpus) == 1 else "unpinned"
    wanted = os.environ.get("BENCH_PLACEMENT")
    if wanted and wanted != actual:
        raise pytest.UsageError(
            f"BENCH_PLACEMENT={wanted} but this process may run on CPUs {sorted(cpus)}: "
            "start it under `taskset -c 0` for pinned"
        )
    return actual


@pytest.fixture(scope="session")
def placement() -> str:
    return current_placement()


# -- servers --------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def masters(placement, recorder):
    """Five redis-servers on free loopback ports, started like the tests'
    (tests/support/servers.py).

    Started from this process, they inherit its CPU affinity: under `taskset -c 0` they run on
    CPU 0 too, which is checked and recorded.
    """
    servers = []
    try:
        for _ in range(N_MASTERS):
            servers.append(RedisServer())
        affinity = {srv.port: sorted(os.sched_getaffinity(srv.pid)) for srv in servers}
        mine = sorted(os.sched_getaffinity(0))
        for port, cpus in affinity.items():
            if cpus != mine:
                raise RuntimeError(f"redis-server :{port} runs on CPUs {cpus}, pytest on {mine}")
        recorder.meta["servers"] = [
            {"port": srv.port, "pid": srv.pid, "cpus": affinity[srv.port]} for srv in servers
        ]
        recorder.meta["client_cpus"] = mine
        yield servers
    finally:
        for srv in servers:
            srv.cleanup()


@pytest.fixture(scope="session")
def ports(masters):
    return [srv.port for srv in masters]


# -- the side file --------------------------------------------------------------------------------


class Recorder:
    """Measurements that are not pytest-benchmark latencies, written to
    results/extra-<placement>.json at the end of the session (merged by bench/report.py)."""

    def __init__(self, placement: str):
        self.placement = placement
        self.meta: dict = {
            "placement": placement,
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "loadavg_start": os.getloadavg(),
        }
        self.rows: list[dict] = []

    def add(self, **row) -> None:
        row["placement"] = self.placement
        self.rows.append(row)

    def write(self) -> None:
        if not self.rows:
            # (a run by hand of latency rows only: `make bench`'s side file stays as it was)
            return
        self.meta["loadavg_end"] = os.getloadavg()
        os.makedirs(RESULTS_DIR, exist_ok=True)
        path = os.path.join(RESULTS_DIR, f"extra-{self.placement}.json")
        with open(path, "w") as f:
            json.dump({"meta": self.meta, "rows": self.rows}, f, indent=1)


@pytest.fixture(scope="session")
def recorder(placement):
    rec = Recorder(placement)
    yield rec
    rec.write()


@pytest.fixture
def key_prefix(placement, request):
    return f"bench:{placement}:{request.node.name}"
