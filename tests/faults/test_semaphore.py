"""Fault injection, tier 1: the semaphore (Redlock.semaphore / AsyncRedlock.semaphore) under a
faulted minority (2 of 5 masters), on both engines and both APIs.

Each scenario is the minority tier's with the workload kind "semaphore" (faults.scenario): a
semaphore of PERMITS permits, CONTENDERS threads (on the async API: tasks) in the four worker
processes contending for it (a process's threads share one Semaphore object), each success
followed by the critical section.  The oracles (faults.oracles, on the judge server):

* the name's occupancy never above PERMITS (its judge's limit), its largest value recorded;
* each permit judged as a lock of its own (interval, occupancy and lost-update oracles on
  <name>:p<index>);
* the leak scan of every key on the masters, permit keys hiredlock:permit:<i>:<name> included;
* success rates and the uncontended latency bound as in faults/test_minority.

The fault-free scenario is the positive control: 0 violations and the occupancy reached PERMITS
(the workload does fill the semaphore, so the limit is tested and not merely unreached).  The
negative control runs a semaphore of 2 x PERMITS permits against the same oracle limit: the
occupancy oracle must report the over-limit."""

from __future__ import annotations

import re
import time

import pytest

from faults.kinds import (
    KIND_FAULTS,
    both_apis,  # noqa: F401  (the fault_api fixture: sync and async)
    fault_id,
    minority_scenario,
)
from faults.known_bugs import B7, B7_EXPLAINS
from faults.oracles import leak_scan

pytest_plugins = ["faults.plugin"]

PERMITS = 3
CONTENDERS = 6  # threads (tasks) over the 4 worker processes: 2, 2, 1, 1
UNCONTENDED = 30
CONTENDED = 120


def semaphore_scenario(title, engine, lab, fault=None, permits=PERMITS, limit=PERMITS):
    return minority_scenario(
        "semaphore", title, engine, lab, fault, permits=permits, limit=limit, contenders=CONTENDERS
    )


@pytest.mark.parametrize("fault", KIND_FAULTS, ids=fault_id)
def test_semaphore_minority_fault(engine, lab, fault):
    title = f"semaphore minority {fault} on 2/5" if fault else "semaphore fault-free"
    scn = semaphore_scenario(title, engine, lab, fault)
    with scn:
        scn.uncontended(UNCONTENDED)
        scn.contended(CONTENDED)
    split = fault is not None and fault.kind == "sigstop"  # (known_bugs.B7, open)
    scn.check_tier1_minority(known_bug=(B7, B7_EXPLAINS) if split else None)
    scn.expect(
        scn.occupancy_max <= PERMITS, f"occupancy {scn.occupancy_max} above {PERMITS} permits"
    )
    if fault is None:
        scn.expect(
            scn.occupancy_max == PERMITS,
            f"the occupancy only reached {scn.occupancy_max} of {PERMITS}: the workload does not "
            "fill the semaphore",
        )


def test_semaphore_over_limit_is_caught(engine, lab):
    """Negative control: 2 x PERMITS permits judged against a limit of PERMITS, the holders
    keeping their permits 20-40 ms so that more than PERMITS of the CONTENDERS overlap."""
    scn = semaphore_scenario(
        "semaphore negative control 6 permits, limit 3", engine, lab, permits=2 * PERMITS
    )
    with scn:
        scn.contended(CONTENDED // 2, cs_ms=[20.0, 40.0])
    v = scn.violations()
    scn.expect(v["occupancy"] > 0, f"the occupancy oracle missed the over-limit: {v}")
    scn.expect(
        scn.occupancy_max > PERMITS, f"occupancy max {scn.occupancy_max} not above {PERMITS}"
    )
    # Each permit is still a lock of its own: only the name's limit is exceeded.
    per_permit = {k: x for k, x in scn.verdicts.items() if re.search(r":p\d+$", k)}
    scn.expect(len(per_permit) == 2 * PERMITS, f"permit judges: {sorted(scn.verdicts)}")
    scn.expect(
        v["interval"] == 0 and v["lost_update"] == 0 and not scn.leaks,
        f"violations besides the occupancy: {v}, leaks {scn.leaks}",
    )
    scn.expect(
        all(x["occupancy_violations"] == 0 for x in per_permit.values()),
        f"a permit had two holders: {per_permit}",
    )


def test_leak_scan_sees_permit_keys(fault_masters):
    """The leak scan looks at permit keys: one without a TTL and one outliving the ttl are both
    reported; one that expires within it is not."""
    fault_masters.reset()
    srv = fault_masters.servers[0]
    a = srv.admin()
    a.set(b"hiredlock:permit:0:f:leak", b"x")
    a.set(b"hiredlock:permit:1:f:leak", b"x", px=60_000)
    a.set(b"hiredlock:permit:2:f:leak", b"x", px=500)
    try:
        found = leak_scan(fault_masters.servers, 1000, time.monotonic_ns())
    finally:
        a.flushall()
    assert len(found) == 2, found
    assert "hiredlock:permit:0:f:leak" in found[0] + found[1], found
    assert "hiredlock:permit:1:f:leak" in found[0] + found[1], found
