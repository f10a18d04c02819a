"""Fault injection, tier 1: the fair lock (Redlock.lock(name, ttl, fair=True) / AsyncRedlock's)
under a faulted minority (2 of 5 masters), on both engines and both APIs.

Each scenario is the minority tier's with the workload kind "fair" (faults.scenario): CONTENDERS
threads (on the async API: tasks) in the four worker processes, each call a new fair lock of the
contended name, each success followed by a critical section of CS_MS (longer than the requests'
spacing, so that a queue forms: up to CONTENDERS - 1 waiters behind the holder).  Before each
call a thread passes the name's RequestGate on the judge (one call through every GAP_MS, across
all the processes) and stamps its request; the order oracle (faults.oracles.order_report) then
pairs every grant with the calls requested >= 10 ms before it that were still waiting.  The
oracles:

* exclusion: the interval, occupancy and lost-update oracles, as for a lock (0 violations, with
  or without a fault);
* order: with no fault, grant order == request order for the calls >= 10 ms apart (the README's
  guarantee: 0 inversions), and a queue did form (several calls waiting at once) so the order
  was the lock's to decide; under a fault the inversions are allowed and reported (summary line:
  "inversions=..." and the first few);
* the leak scan: every key's TTL; the queue's keys hiredlock:fair:q:/e:<name> are allowed for one
  waiting window (they expire on their own within it after the last waiter, e.g. one whose
  leaving missed a faulted master), not longer;
* success rates and the uncontended latency bound as in faults/test_minority.

The negative control runs a plain (non-fair) lock under the same schedule: its waiters race on
each release, and the order oracle must report the inversions.

Two library bugs found here are pinned by tests (faults/known_bugs.py): B5
(test_a_shorter_window_keeps_a_waiters_place: clients with different waiting windows lost a waiter
its place, with no fault) and B6 (test_a_minority_win_keeps_the_waiters_place: an attempt that won
a minority of the masters dropped its ticket there, and two waiters could split the masters
between them for seconds)."""

from __future__ import annotations

import threading
import time

import pytest
from support import braced, urls, wait_until

from faults.kinds import (
    KIND_FAULTS,
    both_apis,  # noqa: F401  (the fault_api fixture: sync and async)
    fault_id,
    minority_scenario,
)
from faults.oracles import Request, RequestGate, leak_scan, order_inversions, order_report
from hiredlock import Outcome

pytest_plugins = ["faults.plugin"]

CONTENDERS = 6  # threads (tasks) over the 4 worker processes: 2, 2, 1, 1
UNCONTENDED = 20
CONTENDED = 36
CS_MS = [14.0, 22.0]  # held longer than GAP_MS: the next calls queue behind the holder
GAP_MS = 15.0  # the RequestGate's spacing: >= 10 ms (the guarantee's), plus a thread's delay


def fair_scenario(title, engine, lab, fault=None):
    return minority_scenario(
        "fair", title, engine, lab, fault, contenders=CONTENDERS, gap_ms=GAP_MS
    )


@pytest.mark.parametrize("fault", KIND_FAULTS, ids=fault_id)
def test_fair_minority_fault(engine, lab, fault):
    title = f"fair minority {fault} on 2/5" if fault else "fair fault-free"
    scn = fair_scenario(title, engine, lab, fault)
    with scn:
        scn.uncontended(UNCONTENDED)
        scn.contended(CONTENDED, cs_ms=CS_MS)
    scn.check_tier1_minority()
    order = scn.order()
    scn.expect(order["requests"] == CONTENDED, f"{order['requests']} requests recorded: {order}")
    if fault is None:
        scn.expect(
            order["inversions"] == 0,
            f"grant order != request order with no fault: {order['inversions']} inversions "
            f"({order['overtaken']} requests overtaken): {order['sample']}",
        )
        scn.expect(
            order["waiting_max"] >= 3 and order["judged_pairs"] >= CONTENDED,
            f"no queue formed (at most {order['waiting_max']} calls waiting at once, "
            f"{order['judged_pairs']} pairs judged): the order is not exercised",
        )
        scn.expect(not scn.fair_leftover, f"tickets left queued: {scn.fair_leftover}")


def test_plain_lock_order_is_caught(engine, lab):
    """Negative control: the contended workload above, unchanged but for a plain lock instead of
    the fair one: its waiters race at each release (the first to try wins), and the order oracle
    must report the inversions that follow (a queue of 3-5 waiters for 36 grants makes dozens),
    while the exclusion oracles stay at 0."""
    scn = fair_scenario("fair negative control plain lock", engine, lab)
    with scn:
        scn.contended(CONTENDED, cs_ms=CS_MS, unfair=True)
    order = scn.order()
    scn.expect(order["inversions"] > 0, f"the order oracle missed the plain lock's order: {order}")
    scn.expect(order["waiting_max"] >= 3, f"no queue formed: {order}")
    scn.expect(scn.violations()["total"] == 0, f"exclusion violations: {scn.violations()}")
    scn.expect(not scn.leaks, f"leaks: {scn.leaks}")


def test_order_oracle():
    """The order oracle alone: FIFO grants pass; a later call granted while an earlier one
    (>= 10 ms before) still waited is an inversion, and so is one that gave up overtaken;
    calls < 10 ms apart are not judged."""
    ms = 1_000_000
    r = lambda asked, done, ok=True, who="w": Request(asked * ms, done * ms, ok, who)  # noqa: E731
    fifo = [r(0, 1), r(15, 50), r(30, 75), r(45, 100)]  # (queued behind each other)
    assert order_inversions(fifo) == []
    rep = order_report(fifo)
    assert rep["judged_pairs"] == 3 and rep["waiting_max"] == 3 and rep["close_pairs"] == 0
    swapped = [r(0, 1), r(15, 55, who="a"), r(30, 30, who="b"), r(45, 80)]
    inv = order_inversions(swapped)
    assert [(a.who, b.who) for a, b in inv] == [("a", "b")]
    gave_up = [r(0, 1), r(15, 60, ok=False, who="a"), r(30, 30, who="b"), r(45, 55, who="c")]
    assert [(a.who, b.who) for a, b in order_inversions(gave_up)] == [("a", "b"), ("a", "c")]
    assert order_report(gave_up)["overtaken"] == 1
    close = [r(0, 1), r(15, 50, who="a"), r(20, 30, who="b")]  # 5 ms apart: not judged
    assert order_inversions(close) == [] and order_report(close)["close_pairs"] == 1
    # a call that returned before the later one was made is not overtaken by it
    assert order_inversions([r(0, 12, ok=False), r(15, 16)]) == []


def test_request_gate(judge_server):
    """The gate lets one caller through every gap, across callers, in sequence: the gaps are
    those of its grants on the judge's clock (the callers' own clocks add their scheduling delays
    on a loaded machine)."""
    admin = judge_server.admin()
    admin.flushall()
    gates = [RequestGate(judge_server.url, "gate:test", 10.0) for _ in range(2)]
    try:
        grants = []
        for i in range(6):
            seq = gates[i % 2].wait()
            grants.append((seq, int(admin.get(gates[0].keys[0]))))  # (its grant's time, in us)
        assert [s for s, _t in grants] == [1, 2, 3, 4, 5, 6]
        gaps_us = [b - a for (_s, a), (_t, b) in zip(grants, grants[1:])]
        assert min(gaps_us) >= 10_000, gaps_us
    finally:
        for g in gates:
            g.close()


def test_leak_scan_sees_fair_queue_keys(fault_masters):
    """The leak scan looks at a fair lock's queue keys: one set for longer than the window and
    one without a TTL are reported; one within the window is not."""
    fault_masters.reset()
    a = fault_masters.servers[0].admin()
    a.zadd(b"hiredlock:fair:q:f:leak", {b"t1": 1})
    a.pexpire(b"hiredlock:fair:q:f:leak", 200)
    a.zadd(b"hiredlock:fair:e:f:leak", {b"t1": 1})
    a.pexpire(b"hiredlock:fair:e:f:leak", 800)
    a.zadd(b"hiredlock:fair:q:f:forever", {b"t1": 1})
    try:
        found = leak_scan(fault_masters.servers, 1000, time.monotonic_ns(), fair_window_ms=250)
    finally:
        a.flushall()
    text = "\n".join(found)
    assert len(found) == 2, found
    assert "hiredlock:fair:e:f:leak' PTTL" in text and "250 ms window" in text, found
    assert "hiredlock:fair:q:f:forever' has no TTL" in text, found


def test_a_shorter_window_keeps_a_waiters_place(engine, make_redlock, masters5, key):
    """No fault: A (retry_delay=1.0, wake=False: its window is 3.1 s) waits for a held fair
    lock; one refused acquire(blocking=False) of a client with retry_delay=0.01 (a 130 ms
    window); 200 ms later C asks; the holder releases.  A asked 250 ms before C, kept trying
    within its window, and must get the lock first (README "Fair lock")."""
    mt = 0.05
    holder_rl = make_redlock(urls(masters5), master_timeout=mt)
    slow_rl = make_redlock(urls(masters5), master_timeout=mt, retry_delay=1.0, wake=False)
    quick_rl = make_redlock(urls(masters5), master_timeout=mt, retry_delay=0.01)
    for rl in (holder_rl, slow_rl, quick_rl):  # every first attempt reaches all five masters
        warm = rl.lock(key + ":warm", 1)
        assert warm.acquire(blocking=False)
        warm.release()
    holder = holder_rl.lock(key, 10, fair=True)
    assert holder.acquire(blocking=False)
    grants: list[str] = []

    def waiter(name, lock):
        if lock.acquire(timeout=10):
            grants.append(name)
            lock.release()

    queue = b"hiredlock:fair:q:" + braced(key)
    a = threading.Thread(target=waiter, args=("A", slow_rl.lock(key, 10, fair=True)))
    a.start()
    time.sleep(0.05)
    ttls = [m.admin().pttl(queue) for m in masters5]
    assert min(ttls) > 2000, f"A's window (3.1 s) on the queue's keys: {ttls}"
    assert not quick_rl.lock(key, 10, fair=True).acquire(blocking=False)
    time.sleep(0.2)
    c = threading.Thread(target=waiter, args=("C", quick_rl.lock(key, 10, fair=True)))
    c.start()
    time.sleep(0.05)
    holder.release()
    for t in (a, c):
        t.join(15)
    assert grants == ["A", "C"], f"granted {grants}: C asked 250 ms after A"


def test_a_minority_win_keeps_the_waiters_place(engine, make_redlock, masters5, key):
    """A holder known on 3 of the 5 masters (set by hand, as one that acquired while the other
    two were out of reach); X asks (retry_delay=1.0, wake=False: one attempt, then a long
    pause): its attempt takes the lock on the 2 free masters only, fails and unlocks.  X still
    waits, so it must still be queued on every master, and Y, asking after it, must be first on
    none of them: granted nowhere."""
    mt = 0.05
    x_rl = make_redlock(urls(masters5), master_timeout=mt, retry_delay=1.0, wake=False)
    y_rl = make_redlock(urls(masters5), master_timeout=mt)
    for rl in (x_rl, y_rl):  # every first attempt reaches all five masters
        warm = rl.lock(key + ":warm", 1)
        assert warm.acquire(blocking=False)
        warm.release()
    for m in masters5[2:]:
        m.admin().set(key, b"holder", px=5000)
    queue = b"hiredlock:fair:q:" + braced(key)
    x = x_rl.lock(key, 5, fair=True)
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("x", x.acquire(timeout=4)))
    t.start()
    try:
        wait_until(lambda: all(m.admin().zcard(queue) for m in masters5[2:]), 5, "X queued")
        time.sleep(0.02)
        queued = [m.admin().zcard(queue) for m in masters5]
        y = y_rl.lock(key, 5, fair=True)
        assert not y.acquire(blocking=False)
    finally:
        for m in masters5[2:]:
            m.admin().delete(key)
        t.join(10)
    assert got.get("x") is True, got
    y_won = [str(v) for v in y.last_votes if v.outcome == Outcome.OK]
    assert queued == [1] * 5 and not y_won, (
        f"X, waiting, is queued on {queued} (per master); Y, asking after it, took the lock "
        f"on {y_won}"
    )
