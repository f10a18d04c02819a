"""Fault injection, tier 1: a slow quorum.  The proxy delays every chunk by 600 ms
in each direction on 3 of 5 masters, ttl 1 s.

* master_timeout 1 s with ttl 1 s is refused up front (ValueError: the timeout and the drift
  would leave no validity), so no lock can ever be handed out with that configuration.
* With the largest per-master timeout the ttl allows (0.98 s), a round trip of 1.2 s: 0 successes
  in 20 attempts; the late OKs of earlier attempts are never counted for later ones; after the
  heal no master keeps a key (each delayed SET is followed by its delayed unlock).
* A quorum that answers in time but whose rounds add up past the ttl (a fenced acquire: two
  rounds of 600 ms each) is never handed out either.
* A quorum that answers within the ttl is handed out with an honest validity: at most
  ttl - round trip - drift.

The attempts run on 10 threads at once (each its own lock name) to keep tier 1 short."""

from __future__ import annotations

import threading
import time

import pytest

from faults.masters import Fault
from faults.oracles import keys_with_prefix
from faults.scenario import Scenario
from hiredlock import HiredlockError, QuorumUnreachable, Redlock
from hiredlock._core.scripts import ACQUIRE_FENCED, RAISE_FENCE, RELEASE

pytest_plugins = ["faults.plugin"]

TTL = 1.0
THREADS = 10


def run_threads(n_attempts, attempt):
    results = [None] * n_attempts
    nxt = iter(range(n_attempts))
    mutex = threading.Lock()

    def work():
        while True:
            with mutex:
                i = next(nxt, None)
            if i is None:
                return
            try:
                results[i] = attempt(i)
            except BaseException as exc:  # reported by the test
                results[i] = ("escaped", repr(exc), 0.0)

    ts = [threading.Thread(target=work) for _ in range(THREADS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    return results


def one_attempt(rl, name, fencing=False):
    lock = rl.lock(name, TTL, fencing=fencing)
    t0 = time.monotonic()
    try:
        got = lock.acquire(blocking=False)
    except QuorumUnreachable as exc:
        return ("QuorumUnreachable", str(exc)[:200], time.monotonic() - t0)
    except HiredlockError as exc:
        return (type(exc).__name__, str(exc)[:200], time.monotonic() - t0)
    elapsed = time.monotonic() - t0
    if got:
        validity = lock.validity
        lock.release()
        return ("acquired", validity, elapsed)
    return ("false", "", elapsed)


def test_timeout_equal_to_ttl_is_refused(engine, fault_masters):
    rl = Redlock(fault_masters.urls("proxy"), backend=engine, master_timeout=1.0)
    try:
        with pytest.raises(ValueError, match="too short"):
            rl.lock("slow-quorum", TTL)
    finally:
        rl.close()


def record(scn, results):
    for r in results:
        scn.unc["calls"] += 1
        scn.unc["lat"].append(r[2])
        scn.unc["ok"] += r[0] == "acquired"
        scn.unc["errors"][r[0]] = scn.unc["errors"].get(r[0], 0) + 1


def test_slow_majority_never_acquires(engine, lab):
    fault = Fault("latency", {"ms": 600})
    scn = Scenario(
        "slow quorum latency 600ms x2 on 3/5",
        engine,
        lab,
        fault=fault,
        faulted=[0, 1, 2],
        ttl=TTL,
        master_timeout=0.98,
    )
    prefix = scn.name + ":"
    with scn:
        rl = scn.redlock(retry_count=1)
        results = run_threads(20, lambda i: one_attempt(rl, f"{prefix}{i}"))
        record(scn, results)
    bad = [r for r in results if r[0] != "QuorumUnreachable"]
    scn.expect(not bad, f"attempts that did not fail with QuorumUnreachable: {bad[:5]}")
    slow = [r[2] for r in results if r[2] > 0.98 * 2 + 0.1]
    scn.expect(not slow, f"attempts longer than two round timeouts: {slow}")
    deadline = time.monotonic() + 2.0
    while (left := keys_with_prefix(lab.masters.servers, prefix)) and time.monotonic() < deadline:
        time.sleep(0.02)
    scn.expect(not left, f"keys left after the heal: {left}")
    scn.check_safety()


def test_fenced_rounds_past_the_ttl_never_acquire(engine, lab):
    """Round 1 (take + count) and round 2 (raise the fence) each need the slow masters: 2 x 600 ms
    > ttl, so the validity is gone before the lock could be handed out: the quorum answered (no
    QuorumUnreachable), the attempt is refused.  The scripts are cached beforehand (else the
    NOSCRIPT -> EVAL round trip makes round 1 time out, a different path)."""
    for srv in lab.masters.servers:
        for script in (ACQUIRE_FENCED, RAISE_FENCE, RELEASE):
            srv.admin().script_load(script.source)
    fault = Fault("latency", {"ms": 300})
    scn = Scenario(
        "slow quorum fenced latency 300ms x2 on 3/5",
        engine,
        lab,
        fault=fault,
        faulted=[0, 1, 2],
        ttl=TTL,
        master_timeout=0.98,
    )
    prefix = scn.name + ":"
    with scn:
        rl = scn.redlock(retry_count=1)
        results = run_threads(4, lambda i: one_attempt(rl, f"{prefix}{i}", fencing=True))
        record(scn, results)
    got = [r for r in results if r[0] == "acquired"]
    scn.expect(not got, f"fenced locks handed out after {TTL}s of rounds: {got}")
    other = [r for r in results if r[0] != "false" or r[2] < 1.1]
    scn.expect(not other, f"expected refusals after two slow rounds (> 1.1 s): {other}")
    scn.check_safety()


def test_slow_quorum_within_ttl_has_honest_validity(engine, lab):
    fault = Fault("latency", {"ms": 300, "direction": "down"})
    scn = Scenario(
        "slow quorum replies +300ms on 3/5",
        engine,
        lab,
        fault=fault,
        faulted=[0, 1, 2],
        ttl=TTL,
        master_timeout=0.98,
    )
    prefix = scn.name + ":"
    with scn:
        rl = scn.redlock(retry_count=1)
        results = run_threads(4, lambda i: one_attempt(rl, f"{prefix}{i}"))
        record(scn, results)
    drift = TTL * rl.drift_factor + 0.002
    for r in results:
        scn.expect(r[0] == "acquired", f"not acquired: {r}")
        validity = r[1]
        # elapsed includes the release; the round trip alone was at least 300 ms
        scn.expect(
            validity <= TTL - 0.3 - drift,
            f"validity {validity:.3f}s not honest after a 300 ms round",
        )
        scn.expect(validity > 0, f"no validity left: {validity}")
    scn.check_safety()
