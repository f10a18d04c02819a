"""Validity.

Two bounds are checked on every success:

* the caller's view (the brief's formula): validity read right after acquire() returns is at most
  ttl - (elapsed measured around acquire) - drift, plus EPS_CALL for the few microseconds of
  Python work that acquire() does before the library's own clock starts (the library measures
  from *after* our t0, so without EPS_CALL the formula is not sound); on the async API the
  elapsed time is measured in the caller's task (apis.timed), as a coroutine would;
* the server's view (sound, no caller slack): the lock's deadline (now + validity) is at most the
  moment the quorum-th longest-living key of ours expires on the masters, minus drift.  Key expiry
  is read with PTTL (ms resolution: 2 ms are allowed for the two truncations).
  With one master made slow by DEBUG SLEEP (the SET on the fast master is applied ~100 ms before
  the quorum completes), a library that measured validity from the end of the round instead of its
  start would overshoot this bound by ~100 ms.
"""

from __future__ import annotations

import contextlib
import time
from datetime import timedelta

import pytest
from apis import make_redlock_fixture, pytest_generate_tests, timed  # noqa: F401  (both APIs)
from support import FOREIGN, assert_no_key, debug_sleep, set_foreign, urls

from hiredlock import LockLost

EPS_CALL = 0.001  # see module docstring


def drift_s(ttl, drift_factor=0.01):
    return ttl * drift_factor + 0.002


def timed_acquire(lock, **kw):
    got, t0, t1 = timed(lock.acquire, **kw)
    v = lock.validity
    return got, t0, t1, v


def key_expiries(servers, key, token):
    """Local monotonic instants at which our key expires on each server holding our token
    (upper estimates: the time is taken after PTTL's reply)."""
    out = []
    for s in servers:
        a = s.admin()
        if a.get(key) != token.encode():
            continue
        pttl = a.pttl(key)
        t = time.monotonic()
        assert pttl != -1, f"our key on {s} has no expiry"
        # 0: under 1 ms left; -2: expired since the GET (a short ttl, a busy host): by t either way
        out.append(t + max(pttl, 0) / 1000.0)
    return sorted(out, reverse=True)


def check_validity(lock, servers, quorum, ttl, t0, t1, v, drift_factor=0.01):
    assert v > 0
    d = drift_s(ttl, drift_factor)
    # caller's view
    assert v <= ttl - (t1 - t0) - d + EPS_CALL, (v, ttl, t1 - t0, d)
    # server's view
    t_v = time.monotonic()
    v_now = lock.validity
    deadline = t_v + v_now
    exp = key_expiries(servers, lock.key, lock.token)
    looked = time.monotonic()
    if len(exp) < quorum:
        # Keys of ours expired before they were read (a short ttl on a busy host): each expired
        # by `looked`, so the lock's deadline must have been past `looked` - drift too.
        exp = sorted(exp + [looked] * (quorum - len(exp)), reverse=True)
    quorum_expiry = exp[quorum - 1]
    assert deadline <= quorum_expiry - d + 0.002, (
        f"lock deadline {deadline - quorum_expiry + d:.4f}s past the quorum's key expiry - drift"
    )


@pytest.mark.parametrize("ttl", [0.05, 0.2, 1, 10, timedelta(seconds=3), 7])
def test_validity_bounds(engine, make_redlock, masters5, key, ttl):
    rl = make_redlock(urls(masters5))
    ttl_s = ttl.total_seconds() if isinstance(ttl, timedelta) else float(ttl)
    for i in range(5):
        lock = rl.lock(f"{key}:{i}", ttl)
        got, t0, t1, v = timed_acquire(lock, blocking=False)
        assert got is True
        check_validity(lock, masters5, rl.quorum, ttl_s, t0, t1, v)
        lock.release()


@pytest.mark.parametrize("drift_factor", [0.0, 0.1, 0.3])
def test_validity_drift_factor(engine, make_redlock, masters5, key, drift_factor):
    rl = make_redlock(urls(masters5), drift_factor=drift_factor)
    lock = rl.lock(key, 2)
    got, t0, t1, v = timed_acquire(lock, blocking=False)
    assert got
    check_validity(lock, masters5, rl.quorum, 2.0, t0, t1, v, drift_factor)
    lock.release()


def test_validity_decreases_and_extend_rearms(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    lock = rl.lock(key, 2)
    assert lock.acquire(blocking=False)
    v1 = lock.validity
    v2 = lock.validity
    assert v2 <= v1
    _, t0, t1 = timed(lock.extend, 5)
    v = lock.validity
    assert v > v1
    check_validity(lock, masters5, rl.quorum, 5.0, t0, t1, v)
    lock.release()
    assert lock.validity == 0.0


def test_validity_counts_from_round_start(engine, make_redlock, masters5, key):
    """3 masters: A answers at once, B sleeps 100 ms, C is taken.  The quorum (A, B) completes
    ~100 ms after A applied the SET, so validity must be measured from the round's start."""
    a, b, c = masters5[:3]
    set_foreign([c], key)
    rl = make_redlock(urls([a, b, c]), master_timeout=0.5)
    lock = rl.lock(key, 2)
    socks = debug_sleep([b], 0.1)
    try:
        got, t0, t1, v = timed_acquire(lock, blocking=False)
    finally:
        for s in socks:
            s.close()
    assert got is True
    assert t1 - t0 >= 0.03, "the slow master did not slow the round; test has no teeth"
    check_validity(lock, [a, b, c], 2, 2.0, t0, t1, v)
    lock.release()
    assert c.admin().get(key) == FOREIGN


@pytest.mark.parametrize(
    "ttl,kw",
    [
        (0.002, {}),  # drift alone (2.02 ms) exceeds it
        (0.005, {}),  # default master timeout 5 ms + drift
        (0.0071, {}),
        (1, {"master_timeout": 1}),
        (1, {"master_timeout": timedelta(milliseconds=990)}),
        (0.01, {"drift_factor": 0.4}),
    ],
)
def test_ttl_without_validity_rejected(engine, make_redlock, masters5, ttl, kw):
    rl = make_redlock(urls(masters5), **kw)
    with pytest.raises(ValueError, match="ttl"):
        rl.lock("never", ttl)
    assert_no_key(masters5, "never")


def test_tight_ttl_never_returns_invalid_lock(engine, make_redlock, masters5, key):
    """ttl just above the static limit (12 ms: drift 2.12 ms + 5 ms master timeout): each attempt
    either fails or returns a lock with positive validity obeying the bounds. At least 30
    attempts, and more (up to 300) until one has won: on a busy host a master's reply can miss
    the 5 ms many times in a row, and a run with no win would check nothing."""
    rl = make_redlock(urls(masters5[:3]))
    wins = 0
    for i in range(300):
        if i >= 30 and wins:
            break
        lock = rl.lock(f"{key}:{i}", 0.012)
        try:
            got, t0, t1 = timed(lock.acquire, blocking=False)
        except Exception as exc:  # QuorumUnreachable if a master was slower than 5 ms
            from hiredlock import LockNotAcquired

            assert isinstance(exc, LockNotAcquired)
            got = False
        if got:
            wins += 1
            v = lock.validity
            assert v <= 0.012 - (t1 - t0) - drift_s(0.012) + EPS_CALL
            # the key may already be gone if we were descheduled: only a positive-validity claim
            # is checked against the servers
            if v > 0.003:
                check_validity(lock, masters5[:3], 2, 0.012, t0, t1, v)
            # expired while we checked: LockLost is fine for a 12 ms lock
            with contextlib.suppress(LockLost):
                lock.release()
        else:
            assert not lock.held
    assert wins > 0, "a 12 ms lock was never acquired on an idle local quorum"
