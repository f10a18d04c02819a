"""Fault injection, tier 1: a majority (3 of 5 masters) faulted, one scenario per
kind of fault.  Every attempt fails, with a typed error (QuorumUnreachable), within its documented
time bound; the live masters keep no key of the attempt; after the heal no master keeps any.

Time bounds (README "How a lock is taken"): an attempt is one round, each master given
master_timeout, then the unlock round, which does not wait for masters that already let a round
time out: one attempt costs at most 2 x master_timeout, plus 20 ms here for scheduling (plus
HIREDLOCK_TEST_EXTRA_SLACK).  A blocking acquire makes retry_count such attempts (each with its
20 ms), separated by at most 1.5 x retry_delay.  A loaded machine can stall the test process
itself for longer than that slack (a CI run saw one attempt of 50 take 271 ms against 120): up to
MAX_STALLED attempts may overrun their bound, by at most STALL_S each. A client that does not
keep the bound overruns it on every attempt (the faulted masters are faulted for all of them).

Counts: the spec's 50 attempts on both engines.

DEBUG SLEEP, even re-issued back to back, leaves a crack: a connection that already had a
command waiting when a sleep began is served, new commands included, the moment that sleep
ends, before the next sleep runs.  A SET sent in the last master_timeout of a sleep on all three
masters at once can so be answered in time by a real majority.  Such an attempt rightly
succeeds; for that kind only, a success is accepted when a majority of the masters is seen
holding the lock's token (checked before the release), and reported as a note.  The check waits
for the sleeping masters (up to two sleeps each, one after another), so that kind's locks get a
5 s ttl: with 1 s their keys could expire before they are read."""

from __future__ import annotations

import time

import pytest
from support import EXTRA_SLACK

from faults.masters import tier1_faults
from faults.oracles import keys_with_prefix
from faults.scenario import Scenario
from hiredlock import HiredlockError, LockLost, Outcome, QuorumUnreachable

pytest_plugins = ["faults.plugin"]

ATTEMPTS = {"native": 50, "python": 50}
BLOCKING_EVERY = 10  # every 10th attempt is a blocking acquire() (retry_count attempts)
RETRY_COUNT, RETRY_DELAY = 3, 0.01
FAILED = {Outcome.TIMEOUT, Outcome.CONN_ERROR, Outcome.ERROR}
MAX_STALLED, STALL_S = 2, 1.0  # attempts a stalled machine may make overrun, and by how much


@pytest.mark.parametrize("fault", tier1_faults(continuous=True), ids=lambda f: f.kind)
def test_majority_fault(engine, lab, fault):
    scn = Scenario(f"majority {fault} on 3/5", engine, lab, fault=fault, faulted=[0, 1, 2])
    mt = scn.master_timeout
    one = 2 * mt + 0.02 + EXTRA_SLACK
    blocking_bound = RETRY_COUNT * (2 * mt + 0.02) + 1.5 * RETRY_DELAY * (RETRY_COUNT - 1)
    blocking_bound += EXTRA_SLACK
    live = lab.masters.servers[3:]
    prefix = scn.name + ":a:"
    problems = []
    overruns = []  # (attempt, blocking, elapsed, bound)
    with scn:
        rl = scn.redlock(retry_count=RETRY_COUNT, retry_delay=RETRY_DELAY)
        for i in range(ATTEMPTS[engine]):
            blocking = i % BLOCKING_EVERY == BLOCKING_EVERY - 1
            lock = rl.lock(f"{prefix}{i}", 5.0 if fault.kind == "debug_sleep" else scn.ttl)
            t0 = time.monotonic()
            try:
                got = lock.acquire(blocking=blocking)
                outcome = "acquired" if got else "false"
                votes = lock.last_votes
            except QuorumUnreachable as exc:
                outcome, votes = "QuorumUnreachable", exc.votes
            except HiredlockError as exc:
                outcome, votes = type(exc).__name__, getattr(exc, "votes", ())
            except Exception as exc:  # only typed errors may escape
                outcome, votes = f"escaped {exc!r}", ()
            elapsed = time.monotonic() - t0
            scn.unc["calls"] += 1
            scn.unc["lat"].append(elapsed)
            between_sleeps = False
            if outcome == "acquired":
                token = lock.token.encode()
                holders = sum(srv.admin().get(lock.key) == token for srv in lab.masters.servers)
                between_sleeps = fault.kind == "debug_sleep" and holders >= 3
                if between_sleeps:
                    scn.notes.append(f"attempt {i}: acquired between two sleeps ({holders}/5)")
                else:
                    scn.unc["ok"] += 1
                try:
                    lock.release()
                except LockLost:
                    # the sleeping masters let the release round time out: expected there
                    if not between_sleeps:
                        problems.append(f"attempt {i}: release of a wrongly acquired lock")
                except HiredlockError as exc:
                    problems.append(f"attempt {i}: release failed: {exc!r}")
            if between_sleeps:
                pass
            elif outcome != "QuorumUnreachable":
                problems.append(f"attempt {i}: {outcome}")
            else:
                scn.unc["errors"]["QuorumUnreachable"] = (
                    scn.unc["errors"].get("QuorumUnreachable", 0) + 1
                )
                n_failed = sum(v.outcome in FAILED for v in votes)
                if n_failed < 3:
                    problems.append(f"attempt {i}: only {n_failed} failed votes: {votes}")
            bound = blocking_bound if blocking else one
            if elapsed > bound:
                overruns.append((i, blocking, elapsed, bound))
            for srv in live:
                if srv.admin().get(lock.key) is not None:
                    problems.append(f"attempt {i}: a key is left on live master {srv.port}")
    if len(overruns) > MAX_STALLED or any(t > b + STALL_S for _, _, t, b in overruns):
        problems.extend(
            f"attempt {i} ({'blocking' if blocking else 'blocking=False'}) took "
            f"{t * 1e3:.1f} ms > {b * 1e3:.0f} ms"
            for i, blocking, t, b in overruns
        )
    elif overruns:
        scn.notes.append(f"{len(overruns)} attempts overran their bound (a stall): {overruns}")
    # After the heal, whatever was buffered (stopped, paused, sleeping, delayed masters) has run:
    # the SET of each attempt, then its unlock.  No master keeps any key of these attempts.
    deadline = time.monotonic() + 1.0
    while (left := keys_with_prefix(lab.masters.servers, prefix)) and time.monotonic() < deadline:
        time.sleep(0.01)
    if left:
        problems.append(f"keys left after the heal: {left}")
    scn.expect(scn.unc["ok"] == 0, f"{scn.unc['ok']} attempts acquired a lock without a quorum")
    scn.expect(not problems, f"{len(problems)} problems: {problems[:8]}")
    scn.check_safety()
