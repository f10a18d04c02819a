"""Fault injection, tier 1: negative controls.  Setups whose violation is certain
(or certainly absent) show that the oracles see what they must, and only that.

* A master set restarted empty at once while a lock is held: holder A took the lock on all five
  masters; three of them are killed and restarted empty at once; holder B then takes the lock on
  those three, a quorum, while A's validity runs.  The interval oracle must report it in every
  one of 20 runs.
* The same with a restart delayed past the ttl (the operational rule of the README): A's validity
  has ended when B gets in; the interval oracle must report 0 of 5 runs (the 5 runs share one
  kill/restart cycle, one lock name each, to keep tier 1 short).
* A holder SIGSTOPped for 1.5 x ttl inside its critical section (a paused process: a GC pause, a
  VM migration): a second holder gets the lock once the first one's keys expired.  The occupancy
  oracle must catch it (>= 9 of 10 runs: both were inside at once), while the interval oracle
  reports 0 (no one held a *valid* lock at the same time as another) and the fenced register
  refuses every stale write of the resumed holder.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

from faults.oracles import Interval, Judge, interval_violations
from faults.scenario import Scenario
from hiredlock import HiredlockError, Redlock

pytest_plugins = ["faults.plugin"]

TTL = 1.0
MT = 0.05
RESTART_RUNS = 20
DELAYED_RUNS = 5
SIGSTOP_RUNS = 10


def restart_at_once(masters, idx):
    for i in idx:
        masters.kill(i)
    masters.restart_many(idx)


def take(rl, name, who):
    lock = rl.lock(name, TTL)
    assert lock.acquire(blocking=False), f"{who} could not take {name}"
    now = time.monotonic_ns()
    return lock, [name, lock.token, who, now, now + int(lock.validity * 1e9)]


def let_go(lock, rec):
    rec.append(time.monotonic_ns())
    # A's lock was lost with the restarted masters: LockLost is the right answer there.
    with contextlib.suppress(HiredlockError):
        lock.release()
    return Interval(*rec)


def test_restart_empty_at_once_is_detected(engine, lab):
    scn = Scenario("negative control restart empty at once", engine, lab)
    detected = 0
    with scn:
        for run in range(RESTART_RUNS):
            name = f"{scn.name}:{run}"
            a = Redlock(lab.masters.urls(), backend=engine, master_timeout=MT)
            b = Redlock(lab.masters.urls(), backend=engine, master_timeout=MT)
            try:
                la, ra = take(a, name, "A")
                restart_at_once(lab.masters, [0, 1, 2])
                lb, rb = take(b, name, "B")
                ivs = [let_go(lb, rb), let_go(la, ra)]
            finally:
                a.close()
                b.close()
            scn.intervals.extend(ivs)
            scn.unc["calls"] += 2
            scn.unc["ok"] += 2
            detected += bool(interval_violations(ivs))
    scn.expect(
        detected == RESTART_RUNS,
        f"the interval oracle reported {detected} of {RESTART_RUNS} certain violations",
    )


def test_restart_after_the_ttl_is_not_reported(engine, lab):
    scn = Scenario("negative control restart after the ttl", engine, lab)
    with scn:
        a = Redlock(lab.masters.urls(), backend=engine, master_timeout=MT)
        b = Redlock(lab.masters.urls(), backend=engine, master_timeout=MT)
        try:
            held = [take(a, f"{scn.name}:{run}", "A") for run in range(DELAYED_RUNS)]
            for i in (0, 1, 2):
                lab.masters.kill(i)
            time.sleep(TTL * (1 + a.drift_factor) + 0.1)
            for i in (0, 1, 2):
                lab.masters.restart(i)
            taken = [take(b, f"{scn.name}:{run}", "B") for run in range(DELAYED_RUNS)]
            for (lb, rb), (la, ra) in zip(taken, held):
                scn.intervals.extend([let_go(lb, rb), let_go(la, ra)])
        finally:
            a.close()
            b.close()
        scn.unc["calls"] = scn.unc["ok"] = 2 * DELAYED_RUNS
    reported = {a.name for a, _b in interval_violations(scn.intervals)}
    scn.expect(not reported, f"the interval oracle reported {len(reported)} of {DELAYED_RUNS}")


def _stopped(pid) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        data = f.read()
    return data[data.rindex(")") + 2] == "T"


def test_paused_holder(engine, lab):
    """Holders are worker processes (SIGSTOP stops all of a process); contenders are threads
    here.  Runs go in batches of as many runs as there are workers."""
    scn = Scenario("negative control holder SIGSTOPped 1.5 x ttl", engine, lab)
    pool = lab.pool
    runs = []  # per run: name, holder result, contender record
    with scn:
        contender_rl = scn.redlock()
        for first in range(0, SIGSTOP_RUNS, len(pool)):
            batch = list(range(first, min(SIGSTOP_RUNS, first + len(pool))))
            workers = [pool[k] for k in range(len(batch))]
            names = [f"{scn.name}:{run}" for run in batch]
            for w, name in zip(workers, names):
                w.send(
                    {
                        "op": "hold",
                        "engine": engine,
                        "masters": lab.masters.urls(),
                        "judge": lab.judge_url,
                        "name": name,
                        "ttl": TTL,
                        "fencing": True,
                        "master_timeout": MT,
                        "label": "holder",
                    }
                )
            stopped_at = []
            try:
                for w in workers:
                    event = w.read(timeout=30)
                    assert event.get("event") == "in_cs", event
                    os.kill(w.pid, signal.SIGSTOP)
                    while not _stopped(w.pid):
                        time.sleep(0.001)
                    stopped_at.append(time.monotonic())
                    scn.judges.append(names[len(stopped_at) - 1])
                records = [None] * len(batch)

                def contend(k, names=names, records=records):
                    lock = contender_rl.lock(names[k], TTL, fencing=True)
                    if not lock.acquire(timeout=3 * TTL):
                        records[k] = "not acquired"
                        return
                    t1 = time.monotonic_ns()
                    rec = [names[k], lock.token, "contender", t1, t1 + int(lock.validity * 1e9)]
                    judge = Judge(lab.judge_url, names[k])
                    try:
                        judge.enter()
                        judge.write_counter(judge.read_counter() + 1)
                        accepted = judge.fenced_write(lock.fence, "contender")
                        judge.exit()
                    finally:
                        judge.close()
                    rec.append(time.monotonic_ns())
                    rec.append(lock.fence)
                    lock.release()
                    records[k] = (Interval(*rec), accepted)

                ts = [threading.Thread(target=contend, args=(k,)) for k in range(len(batch))]
                for t in ts:
                    t.start()
                for k, w in enumerate(workers):
                    time.sleep(max(0.0, stopped_at[k] + 1.5 * TTL - time.monotonic()))
                    os.kill(w.pid, signal.SIGCONT)
                    w.send({"op": "go"})
                for t in ts:
                    t.join(30)
            finally:
                for w in workers:
                    os.kill(w.pid, signal.SIGCONT)
            for k, w in enumerate(workers):
                res = w.result(timeout=30)
                runs.append((names[k], res, records[k]))
        occupancy_caught = interval_reported = stale_refused = 0
        problems = []
        for name, holder, contender in runs:
            if not isinstance(contender, tuple):
                problems.append(f"{name}: contender {contender}")
                continue
            iv_c, accepted = contender
            iv_h = Interval(*holder["interval"])
            scn.intervals.extend([iv_h, iv_c])
            scn.unc["calls"] += 2
            scn.unc["ok"] += 2
            verdict = Judge(lab.judge_url, name)
            try:
                v = verdict.verdict()
            finally:
                verdict.close()
            occupancy_caught += v["occupancy_violations"] > 0
            interval_reported += bool(interval_violations([iv_h, iv_c]))
            stale_refused += holder["fence_accepted"] is False and accepted is True
            if holder["escaped"]:
                problems.append(f"{name}: holder escaped {holder['escaped']}")
            if holder["fence"] >= iv_c.fence:
                problems.append(
                    f"{name}: fences not increasing: {holder['fence']} then {iv_c.fence}"
                )
        scn.notes.append(
            f"occupancy caught {occupancy_caught}/{len(runs)}, interval reported "
            f"{interval_reported}, stale writes refused {stale_refused}/{len(runs)}"
        )
    scn.expect(not problems, f"{problems[:5]}")
    scn.expect(len(runs) == SIGSTOP_RUNS, f"{len(runs)} runs")
    scn.expect(occupancy_caught >= 9, f"occupancy oracle caught {occupancy_caught} of {len(runs)}")
    scn.expect(interval_reported == 0, f"interval oracle reported {interval_reported} (expected 0)")
    scn.expect(
        stale_refused == len(runs), f"stale writes refused in {stale_refused} of {len(runs)}"
    )
