"""connect() waits for each master up to the connect allowance (CONNECT_TIMEOUT_MIN_MS from the
round's start), not only up to the master timeout: a master whose first answer takes longer than
the master timeout but less than the allowance is connected, and votes OK, on both engines and
both APIs."""

from __future__ import annotations

import pytest
from apis import make_redlock_fixture, pytest_generate_tests  # noqa: F401  (both APIs)
from faults.proxy import FaultProxy

from hiredlock import Outcome
from hiredlock._core.scripts import CONNECT_TIMEOUT_MIN_MS, MASTER_TIMEOUT_MAX_MS

# The slow master's replies come this late: past the default master timeout (at most
# MASTER_TIMEOUT_MAX_MS), well inside the connect allowance.
SLOW_MS = 70.0


@pytest.fixture
def slow_last_master(masters5):
    """Five masters; the last one is reached through a proxy that delays its replies by SLOW_MS."""
    proxy = FaultProxy([("127.0.0.1", masters5[4].port)])
    try:
        proxy.set_mode(0, "latency", ms=SLOW_MS, direction="down")
        yield [s.url for s in masters5[:4]] + [proxy.url(0)]
    finally:
        proxy.close()


def test_connect_waits_for_a_slow_master_up_to_the_connect_allowance(
    make_redlock, slow_last_master
):
    assert MASTER_TIMEOUT_MAX_MS < SLOW_MS < CONNECT_TIMEOUT_MIN_MS
    rl = make_redlock(slow_last_master)  # default master_timeout: MASTER_TIMEOUT_MAX_MS at most
    votes = rl.connect()
    assert [vote.outcome for vote in votes] == [Outcome.OK] * 5, votes
