"""pytest plugin of the fault tests: fixtures, the `soak` marker, the scenario summary.

Loaded by every tests/faults/test_*.py with `pytest_plugins = ["faults.plugin"]`, so it works when
one file is run alone too.  A module that sets `FAULT_TIER = 2` has all its tests marked `soak`;
soak tests run only when asked for (`-m soak`, or HIREDLOCK_SOAK=1: what `make soak` does) and
are skipped, with the reason, in the default run.

The fault matrix: a scenario parametrised by engine, API and fault (each of 2, 2 and 7 or 8)
runs, by default, on the pairwise cover of the three (half its cells): each fault on both engines
and on both APIs, and each engine on both APIs. HIREDLOCK_FULL_MATRIX=1 (`make test-full`) runs
every cell. A module whose scenarios all run on one API without a `fault_api` parameter says which
with `SCENARIO_API` (default "sync").
"""

from __future__ import annotations

import os
from typing import Optional

import pytest
from servers import RedisServer
from thinning import FULL_MATRIX_ENV, full_matrix_requested

from .masters import TIER1_FAULTS, FaultyMasters
from .scenario import SUMMARIES, Lab, dump_dir
from .worker import WorkerPool

FAULTS_DIR = os.path.dirname(os.path.abspath(__file__))
SOAK_HELP = "soak: tier-2 fault-injection soak test (make soak; about 15 minutes)"


def pytest_configure(config):
    config.addinivalue_line("markers", SOAK_HELP)


def soak_requested(config) -> bool:
    if os.environ.get("HIREDLOCK_SOAK", "").strip() in {"1", "true", "yes"}:
        return True
    expr = config.getoption("markexpr", "") or ""
    return "soak" in expr and "not soak" not in expr


MATRIX_KINDS = [fault.kind for fault in TIER1_FAULTS]
MATRIX_COUNTS = {"run": 0, "cells": 0}  # the fault matrix's cells collected, and those kept


def matrix_cell(item) -> Optional[tuple[str, str, Optional[str]]]:
    """(engine, API, fault kind) of a scenario of the fault matrix (kind None: the run without a
    fault); None for any other test."""
    callspec = getattr(item, "callspec", None)
    if callspec is None or not str(item.path).startswith(FAULTS_DIR):
        return None
    params = callspec.params
    if "fault" not in params or "engine" not in params:
        return None
    api = params.get("fault_api", getattr(item.module, "SCENARIO_API", "sync"))
    return params["engine"], api, getattr(params["fault"], "kind", None)


def in_pairwise_cover(cell: tuple[str, str, Optional[str]]) -> bool:
    """Whether a cell of the matrix is in its pairwise cover (see the module's docstring):
    faults at even places of MATRIX_KINDS (and the run without a fault) run on (native, sync) and
    (python, async), those at odd places on (native, async) and (python, sync)."""
    engine, api, kind = cell
    even = (MATRIX_KINDS.index(kind) if kind in MATRIX_KINDS else len(MATRIX_KINDS)) % 2 == 0
    return (engine == "native") == ((api == "sync") == even)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    run_soak = soak_requested(config)
    full = full_matrix_requested()
    kept, deselected = [], []
    for item in items:
        module = getattr(item, "module", None)
        if getattr(module, "FAULT_TIER", 1) == 2:
            item.add_marker("soak")
            if not run_soak:
                item.add_marker(pytest.mark.skip(reason="tier-2 soak: run it with `make soak`"))
        cell = matrix_cell(item)
        if cell is None:
            kept.append(item)
            continue
        MATRIX_COUNTS["cells"] += 1
        if full or in_pairwise_cover(cell):
            kept.append(item)
            MATRIX_COUNTS["run"] += 1
        else:
            deselected.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept


def pytest_sessionfinish(session):
    # A worker of pytest-xdist (make test runs two) hands its scenarios' summaries and its count
    # of the matrix to the controller, which prints them (pytest_testnodedown).
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["fault_summaries"] = list(SUMMARIES)
        workeroutput["fault_matrix"] = dict(MATRIX_COUNTS)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist's controller: a worker ended (every worker counted the same matrix)."""
    output = getattr(node, "workeroutput", {})
    SUMMARIES.extend(output.get("fault_summaries", ()))
    MATRIX_COUNTS.update(output.get("fault_matrix", {}))


def pytest_terminal_summary(terminalreporter):
    if not SUMMARIES:
        return
    terminalreporter.section("fault-injection scenarios")
    cells, run = MATRIX_COUNTS["cells"], MATRIX_COUNTS["run"]
    if cells:
        how = "all kept" if run == cells else f"the pairwise cover ({FULL_MATRIX_ENV}=1: all)"
        # (counted before -k and -m select: those may leave out more)
        terminalreporter.write_line(f"fault matrix: {run} of {cells} cells kept, {how}")
    for line in SUMMARIES:
        terminalreporter.write_line(line)
    path = os.path.join(dump_dir(), f"summaries-{os.getpid()}.txt")
    with open(path, "w") as f:
        f.write("\n".join(SUMMARIES) + "\n")
    terminalreporter.write_line(f"(also in {path})")


# -- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def fault_masters(redis_server_bin):
    """Five masters with fault methods, each behind a fault-proxy listener (session-wide)."""
    m = FaultyMasters(5)
    yield m
    m.cleanup()


@pytest.fixture(scope="session")
def judge_server(redis_server_bin):
    """The judge: a redis-server that no fault ever touches."""
    srv = RedisServer()
    yield srv
    srv.cleanup()


@pytest.fixture(scope="session")
def _worker_pool():
    holder = {"pool": None}
    yield holder
    if holder["pool"] is not None:
        holder["pool"].close()


@pytest.fixture
def worker_pool(_worker_pool):
    """Four client processes (made once, revived if a test killed or stopped one)."""
    pool = _worker_pool["pool"]
    if pool is not None and not pool.healthy():
        pool.close()
        pool = None
    if pool is None:
        pool = _worker_pool["pool"] = WorkerPool(4)
    yield pool
    if not pool.healthy():
        pool.close()
        _worker_pool["pool"] = None


@pytest.fixture
def fault_api() -> str:
    """The API the scenarios' clients use: "sync" here; a module that runs the scenarios on the
    async API (tests/faults/test_async_api.py) overrides this fixture with one returning "async"."""
    return "sync"


@pytest.fixture
def fault_worker_loop() -> str:
    """The event loop of the worker processes' clients on the async API: "asyncio" here; a
    module may override it with one returning "uvloop"."""
    return "asyncio"


@pytest.fixture
def lab(fault_masters, judge_server, worker_pool, fault_api, fault_worker_loop):
    """The five masters reset (healed, empty, no cached script), the judge empty, four workers;
    the scenarios' clients on the `fault_api` API (the workers' on a `fault_worker_loop` loop)."""
    fault_masters.reset()
    judge_server.admin().flushall()
    yield Lab(
        fault_masters, judge_server, worker_pool, api=fault_api, worker_loop=fault_worker_loop
    )
    fault_masters.heal()
