"""Fault injection, tier 1, on the async API: the minority, majority, lost-replies,
slow-quorum and error-reply scenarios run again, unchanged, with every client an
hiredlock.aio.AsyncRedlock on both engines, and must show the same 0 violations.

The scenarios are the sync tier's own test functions, imported (pytest collects them here again),
so their workloads, counts, time bounds and oracles (interval oracle, occupancy, lost update,
fenced register, leak scan, untyped exceptions) are the same by construction.  What changes is
the API, through two fixtures this module overrides:

* `fault_api` (faults.plugin) = "async": Scenario.redlock() hands out an AsyncRedlock behind
  support/apis.py's facade (its calls run as tasks of an asyncio event loop; the slow-quorum tests'
  10 threads become 10 tasks sharing one AsyncRedlock, so their rounds go out batched), and the
  contending worker processes build theirs the same way (faults.worker, "api": "async");
* `fault_worker_loop` (faults.plugin) = "uvloop": those workers' loops are uvloop's;
* `api` (support/apis.py) = "async": the error-reply tests' `make_redlock` builds AsyncRedlocks.

Not repeated here: the error-reply tests that already run on both APIs in their own module
(@both_apis: the NOSCRIPT fallback ones).
"""

from __future__ import annotations

import pytest
from apis import AsyncApi, LoopThread, make_redlock_fixture  # noqa: F401  (the fixture)

# The sync tier's scenarios, collected again in this module (so on the async API).
from faults.test_error_replies import (  # noqa: F401
    big_rdb,
    test_busy_script,
    test_loading,
    test_noauth_on_extend_and_release,
    test_noperm_acquire,
    test_noperm_release_and_extend,
    test_oom_fenced_acquire_extend_release,
    test_readonly_on_extend_and_release,
    test_readonly_replica_in_list_minority,
    test_readonly_replicas_majority,
    test_script_flush_storm,
    test_wrongtype_fence_counter,
)
from faults.test_lost_replies import test_drop_replies_on_three, test_drop_replies_on_two  # noqa: F401
from faults.test_majority import test_majority_fault  # noqa: F401
from faults.test_minority import test_minority_fault  # noqa: F401
from faults.test_slow_quorum import (  # noqa: F401
    TTL,
    test_fenced_rounds_past_the_ttl_never_acquire,
    test_slow_majority_never_acquires,
    test_slow_quorum_within_ttl_has_honest_validity,
)

pytest_plugins = ["faults.plugin"]
SCENARIO_API = "async"  # (the fault matrix's API for these scenarios: see faults.plugin)


@pytest.fixture
def fault_api() -> str:
    """Scenario clients and worker processes use hiredlock.aio (see faults.plugin)."""
    return "async"


@pytest.fixture
def fault_worker_loop() -> str:
    """The contending worker processes run their AsyncRedlocks on uvloop (the test process's
    clients on asyncio): both loops meet every scenario without running the tier twice."""
    return "uvloop"


@pytest.fixture
def api() -> str:
    """`make_redlock` (tests/support/apis.py) builds AsyncRedlocks."""
    return "async"


def test_every_client_here_is_async(lab, make_redlock, fault_masters):
    """The overrides take effect: a scenario's client and make_redlock's are AsyncRedlocks (a
    broken override would silently rerun the sync tier)."""
    from faults.scenario import Scenario
    from hiredlock.aio import AsyncRedlock

    assert lab.api == "async" and lab.worker_loop == "uvloop"
    scn = Scenario("api check", "python", lab)
    with scn:
        assert isinstance(scn.redlock(), AsyncApi)
        assert isinstance(scn.redlocks[0]._target, AsyncRedlock)
    client = make_redlock(fault_masters.urls())
    assert isinstance(client, AsyncApi) and isinstance(client._target, AsyncRedlock)


def test_timeout_equal_to_ttl_is_refused(engine, fault_masters):
    """As the sync tier's: a per-master timeout of the whole ttl leaves no validity, so the lock
    is refused up front (ValueError), here by AsyncRedlock.lock()."""
    runner = LoopThread()
    try:
        rl = AsyncApi(runner, fault_masters.urls("proxy"), backend=engine, master_timeout=1.0)
        try:
            with pytest.raises(ValueError, match="too short"):
                rl.lock("slow-quorum", TTL)
        finally:
            rl.close()
    finally:
        runner.close()
