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
    if fault.kind in DEGRADING:
        scn.check_degraded()


# The faults whose masters fail rounds that count, for certain: they fail at once (kill), or never
# answer (sigstop, drop_replies), so every release (which waits for every master) times out on
# them or finds them lagging. (A slow master may answer within the per-master timeout: latency.)
DEGRADING = ("kill", "sigstop", "drop_replies")


@pytest.mark.parametrize("fault", [f for f in TIER1_FAULTS if f.kind in DEGRADING], ids=str)
def test_one_master_faulted_of_three_is_degraded(engine, lab, fault):
    """The smallest majority: one master faulted of three, each round counts on the other two."""
    scn = Scenario(f"minority {fault} on 1/3", engine, lab, fault=fault, faulted=[0], n_masters=3)
    with scn:
        scn.uncontended(UNCONTENDED // 4)
    scn.check_safety()
    scn.check_degraded()


def test_a_healthy_run_is_never_degraded(engine, lab):
    # (a per-master timeout that no stall of a loaded machine reaches: a master that misses the
    # scenario's 50 ms has failed, and that round would rightly be degraded)
    scn = Scenario("healthy run", engine, lab, master_timeout=0.3)
    with scn:
        scn.uncontended(UNCONTENDED)
    scn.check_safety()
    assert scn.unc["ok"] == UNCONTENDED
    assert scn.events and scn.degraded() == [], scn.degraded()
