"""What the lock kinds' tier-1 files (faults/test_semaphore, test_rwlock, test_fairlock) share: the
minority faults they run, the scenario on 2 faulted masters of 5, and the `fault_api` fixture on
both APIs (a module imports `both_apis` to run its scenarios on sync and async)."""

from __future__ import annotations

from typing import Any, Optional

import pytest

from faults.masters import TIER1_FAULTS
from faults.scenario import Scenario

# The minority faults each kind runs under (on masters 0 and 1), with None: the fault-free
# scenario, the positive control.
KIND_FAULTS = [None] + [
    f
    for f in TIER1_FAULTS
    if f.kind in ("kill", "sigstop", "drop_replies", "latency", "blackhole", "reset")
]


def fault_id(fault: Any) -> str:
    return fault.kind if fault else "none"


@pytest.fixture(name="fault_api", params=["sync", "async"])
def both_apis(request) -> str:
    """Every scenario of the importing module on both APIs (overrides faults.plugin's)."""
    return request.param


def minority_scenario(
    kind: str, title: str, engine: str, lab: Any, fault: Optional[Any] = None, **options: Any
) -> Scenario:
    """A scenario of `kind` with `fault` (None: none) on masters 0 and 1 of the five."""
    return Scenario(
        title,
        engine,
        lab,
        fault=fault,
        faulted=[0, 1] if fault is not None else [],
        kind=kind,
        **options,
    )
