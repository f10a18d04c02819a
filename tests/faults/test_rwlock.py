"""Fault injection, tier 1: the read-write lock (Redlock.rwlock / AsyncRedlock.rwlock) under a
faulted minority (2 of 5 masters), on both engines and both APIs.

Each scenario is the minority tier's with the workload kind "rwlock" (faults.scenario):
CONTENDERS threads (on the async API: tasks) in the four worker processes, two of every three
readers and the third a writer (ROLES); a process's threads share one RWLock object and take a
new lock object from its read() or write() for every acquisition, each success followed by the
critical section.  The oracles (faults.oracles, on the judge server):

* never a writer together with any other holder: at every entry the judge counts the holder in
  and reads the writers' and the readers' occupancies in one step (writers <= 1, and no reader
  while a writer is inside); readers may overlap;
* the interval oracle's read-write variant (a writer's interval overlaps nobody's);
* the lost-update counter (writers) and torn reads (a reader sees the counter change);
* the leak scan: every key's TTL, the readers' entries hiredlock:rw:r:<name> (each must expire
  within the ttl after the last release), and the marks hiredlock:rw:ww:/rw:/rp: (left on
  purpose by refused attempts: allowed, but none set for longer than the waiting window);
* success rates and the uncontended latency bound as in faults/test_minority.

The fault-free scenario is the positive control: 0 violations, readers did overlap (the most
readers inside at once > 1) and writers did get in, so the oracle is exercised and can fail for
the right reason.  The negative control lets the writers take read locks: the writer-with-reader
overlaps that follow must be reported by the occupancy and the interval oracles."""

from __future__ import annotations

import time

import pytest

from faults.kinds import (
    KIND_FAULTS,
    both_apis,  # noqa: F401  (the fault_api fixture: sync and async)
    fault_id,
    minority_scenario,
)
from faults.oracles import Interval, RWJudge, leak_scan, rw_interval_violations

pytest_plugins = ["faults.plugin"]

ROLES = ("r", "r", "w")  # two of every three contenders read
CONTENDERS = 6  # threads (tasks) over the 4 worker processes: 2, 2, 1, 1 (2 writers, 4 readers)
UNCONTENDED = 30
CONTENDED = 120


def rwlock_scenario(title, engine, lab, fault=None):
    return minority_scenario(
        "rwlock", title, engine, lab, fault, roles=ROLES, contenders=CONTENDERS
    )


@pytest.mark.parametrize("fault", KIND_FAULTS, ids=fault_id)
def test_rwlock_minority_fault(engine, lab, fault):
    title = f"rwlock minority {fault} on 2/5" if fault else "rwlock fault-free"
    scn = rwlock_scenario(title, engine, lab, fault)
    with scn:
        scn.uncontended(UNCONTENDED)
        scn.contended(CONTENDED)
    scn.check_tier1_minority()
    scn.expect(scn.writer_max <= 1, f"{scn.writer_max} writers inside at once")
    if fault is None:
        scn.expect(
            scn.reader_max > 1,
            f"readers never overlapped (at most {scn.reader_max} inside at once): the workload "
            "does not exercise shared reading",
        )
        scn.expect(scn.writer_max == 1, "no writer got in: the workload does not write")
        scn.expect(
            scn.by_role["w"][0] > 0 and scn.by_role["r"][0] > 0,
            f"successes per role: {scn.by_role}",
        )


def test_rwlock_writer_with_reader_is_caught(engine, lab):
    """Negative control: the contended workload of the scenarios above, unchanged but for the
    "writers" taking read locks (nothing keeps them from the readers or each other): the
    oracles must report writers among readers (in a few hundred ms the workload makes dozens)."""
    scn = rwlock_scenario("rwlock negative control writers read", engine, lab)
    with scn:
        scn.contended(CONTENDED, writers_read=True)
    v = scn.violations()
    verdict = scn.verdicts[scn.name + ":c"]
    scn.expect(v["occupancy"] > 0, f"the occupancy oracle missed the writers among readers: {v}")
    scn.expect(v["interval"] > 0, f"the interval oracle missed the writers among readers: {v}")
    scn.expect(
        any("(w) entered" in x or "(r) entered" in x for x in verdict["violation_log"]),
        f"no violation logged: {verdict}",
    )
    scn.expect(not scn.leaks, f"leaks: {scn.leaks}")


def test_rw_judge_and_interval_oracle():
    """The oracles alone: readers together pass, a writer with anyone is caught (both orders,
    and two writers), by the judge and by the interval oracle."""
    iv = lambda role, tok, a, b: Interval(f"n:{role}", tok, "h", a, b + 100, b)  # noqa: E731
    readers = [iv("r", "r1", 0, 50), iv("r", "r2", 10, 60), iv("r", "r3", 20, 30)]
    assert rw_interval_violations(readers) == []
    assert rw_interval_violations([*readers, iv("w", "w1", 60, 70), iv("w", "w2", 80, 90)]) == []
    assert len(rw_interval_violations([*readers, iv("w", "w1", 55, 70)])) == 1  # r2 still in
    assert len(rw_interval_violations([*readers, iv("w", "w1", 35, 70)])) == 2  # r1, r2 (r3 out)
    assert len(rw_interval_violations([iv("w", "w1", 0, 10), iv("w", "w2", 5, 20)])) == 1
    assert len(rw_interval_violations([iv("w", "w1", 0, 100), iv("r", "r1", 40, 50)])) == 1


def test_rw_judge(judge_server):
    judge_server.admin().flushall()
    j = RWJudge(judge_server.url, "rw:judge")
    try:
        assert j.enter("r") == (0, 1, False)
        assert j.enter("r") == (0, 2, False)
        assert j.enter("w") == (1, 2, True)  # a writer among readers
        j.exit("w")
        j.exit("r")
        j.exit("r")
        assert j.enter("w") == (1, 0, False)
        assert j.enter("r") == (1, 1, True)  # a reader while a writer is inside
        assert j.enter("w") == (2, 1, True)  # and a second writer
        v = j.verdict()
        assert v["occupancy_violations"] == 3 and v["reader_max"] == 2 and v["writer_max"] == 2
        assert v["occupancy_max"] == 3 and len(v["violation_log"]) == 3
    finally:
        j.close()


def test_leak_scan_sees_rwlock_keys(fault_masters):
    """The leak scan looks at read-write lock keys: a reader entry outliving the ttl (in a set
    whose key expires within it), a writer key without a TTL and a mark set for longer than the
    window are reported; a live reader within the ttl and a mark within the window are not."""
    fault_masters.reset()
    srv = fault_masters.servers[0]
    a = srv.admin()
    secs, usecs = a.time()
    now_ms = secs * 1000 + usecs // 1000
    a.zadd(b"hiredlock:rw:r:f:leak", {b"ok": now_ms + 500, b"leaked": now_ms + 60_000})
    a.pexpire(b"hiredlock:rw:r:f:leak", 900)
    a.set(b"hiredlock:rw:w:f:leak", b"x")
    a.set(b"hiredlock:rw:ww:f:leak", b"x", px=800)
    a.set(b"hiredlock:rw:rp:f:leak", b"x", px=200)
    try:
        found = leak_scan(fault_masters.servers, 1000, time.monotonic_ns(), rw_window_ms=250)
    finally:
        a.flushall()
    text = "\n".join(found)
    assert len(found) == 3, found
    assert "b'leaked'" in text and "b'ok'" not in text, found
    assert "hiredlock:rw:w:f:leak' has no TTL" in text, found
    assert "hiredlock:rw:ww:f:leak" in text and "hiredlock:rw:rp:" not in text, found
