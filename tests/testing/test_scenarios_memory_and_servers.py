"""The scenarios of scenario_locks.py on memory masters and on five real redis-servers (both
engines there), on both APIs: memory masters behave as servers do."""

from __future__ import annotations

import pytest
from apis import make_redlock_fixture, pytest_generate_tests  # noqa: F401  (sync and async APIs)
from memory_servers import memory_servers
from scenario_locks import SCENARIOS
from support import no_extensions

import hiredlock

WHERE = ["memory", "native", "python"]


@pytest.fixture(params=WHERE, ids=[f"{where}-masters" for where in WHERE])
def engine(request) -> str:
    if request.param == "native" and "native" not in hiredlock.available_backends():
        if no_extensions():
            pytest.skip("native engine not built: HIREDLOCK_NO_EXTENSIONS=1")
        pytest.fail("the native engine (hiredlock._native) does not load", pytrace=False)
    return request.param


@pytest.fixture
def servers(engine, request):
    if engine == "memory":
        return memory_servers(5)
    return request.getfixturevalue("masters5")


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.__name__ for s in SCENARIOS])
def test_scenario(scenario, make_redlock, servers, key):
    scenario(make_redlock, servers, key)
