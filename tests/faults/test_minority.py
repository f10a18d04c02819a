"""Fault injection, tier 1: a minority (2 of 5 masters) faulted, one scenario per
kind of fault.  Uncontended acquisitions (one client, fresh names, acquire(blocking=False)) and
contended ones (4 worker processes, one name, acquire(timeout=2)): at least 99% succeed, every
oracle reports 0 violations, the leak scan is clean, each uncontended acquire returns within the
per-master timeout + 20 ms, and nothing but hiredlock's typed errors escapes.

Counts: the spec's 200 uncontended + 200 contended, on both engines."""

from __future__ import annotations

import pytest

from faults.known_bugs import liveness_bug
from faults.masters import TIER1_FAULTS
from faults.scenario import Scenario

pytest_plugins = ["faults.plugin"]

UNCONTENDED = 200
CONTENDED = 200


@pytest.mark.parametrize("fault", TIER1_FAULTS, ids=lambda f: f.kind)
def test_minority_fault(engine, lab, fault):
    known = liveness_bug(engine, fault.kind)
    scn = Scenario(f"minority {fault} on 2/5", engine, lab, fault=fault, faulted=[0, 1])
    with scn:
        scn.uncontended(UNCONTENDED)
        scn.contended(CONTENDED)
    scn.check_tier1_minority(known_bug=known)
