"""The engine contract's stop rules: which masters a round waits for, and how long.

* Once the outcome is decided, a master that let an earlier round time out (it "lags": it still
  owes that round's reply) is not waited for: a stopped master does not cost every release and
  extend its master_timeout.
* While a key is undecided a lagging master is waited for: skipping a master whose answer can
  change the outcome would be a false failure (a LockLost for a lock that is held).
* A master whose connection opens in the round has CONNECT_TIMEOUT_MIN_MS from the round's start,
  whatever the master_timeout, while masters connected before keep the master_timeout (the
  connect allowance itself: tests/engine/test_connect.py).
"""

from __future__ import annotations

import time

import pytest
from round_support import DebugSleep
from support import assert_no_key, assert_pttl_between, debug_sleep, urls

from hiredlock import LockLost, QuorumUnreachable

MASTER_TIMEOUT = 0.5
TTL = 10.0


def test_lagging_master_not_needed_is_not_waited_for(engine, masters5, make_redlock, key):
    servers = masters5[:3]
    rl = make_redlock([s.url for s in servers], master_timeout=MASTER_TIMEOUT)
    lock = rl.lock(key, TTL)
    assert lock.acquire(blocking=False)
    victim = rl.lock(key + ":victim", TTL)
    assert victim.acquire(blocking=False)
    servers[2].stop()
    try:
        victim.extend()  # 2 of 3 extend: enough; the round waited for the third until its timeout
        t0 = time.monotonic()
        lock.extend()
        lock.release()
        elapsed = time.monotonic() - t0
    finally:
        servers[2].cont()
    assert elapsed < MASTER_TIMEOUT, f"two rounds waited {elapsed:.3f} s for a lagging master"
    victim.release()


def test_a_new_connection_has_the_connect_bound(engine, masters5, make_redlock, key):
    """3 of 5 masters answer some 30 ms into the round, past a 10 ms master_timeout: on
    connections opened in the round they still count (CONNECT_TIMEOUT_MIN_MS: 100 ms); on warm
    connections they time out."""
    rl = make_redlock([s.url for s in masters5], master_timeout=0.01)
    sleep = DebugSleep(masters5[:3], 0.06)
    try:
        lock = rl.lock(key, 1.0)
        assert lock.acquire(blocking=False), lock.last_votes
    finally:
        sleep.finish()
    assert lock.held
    lock.release()
    sleep = DebugSleep(masters5[:3], 0.1)
    try:
        with pytest.raises(QuorumUnreachable):
            rl.lock(key + ":warm", 1.0).acquire(blocking=False)
    finally:
        sleep.finish()


# -- a lagging master while the outcome is undecided -----------------------------------------------


# The sleeping masters make the first round time out (after MASTER_TIMEOUT) and wake up in the
# middle of the second one: about 0.25 s of margin on either side.
SLEEP_S = 0.8


@pytest.mark.parametrize("op", ["extend", "release"])
@pytest.mark.parametrize(
    "n_masters, n_lagging", [(1, 1), (3, 2)], ids=["one-master", "two-of-three-lagging"]
)
def test_lagging_masters_are_waited_for_while_undecided(
    engine, make_redlock, masters5, key, op, n_masters, n_lagging
):
    masters = masters5[:n_masters]
    rl = make_redlock(urls(masters), master_timeout=MASTER_TIMEOUT)
    first, second = rl.lock(key + ":first", TTL), rl.lock(key + ":second", TTL)
    assert first.acquire(blocking=False)
    assert second.acquire(blocking=False)
    sleepers = debug_sleep(masters[:n_lagging], SLEEP_S)
    try:
        with pytest.raises(LockLost):
            first.extend()  # times out on the sleeping masters: they lag from now on
        # They wake up within this round's master_timeout, and a quorum needs them.
        if op == "extend":
            second.extend(60)
        else:
            second.release()
    finally:
        for sock in sleepers:
            sock.close()
    if op == "extend":
        assert second.held
        assert_pttl_between(masters, key + ":second", 30_000, 60_000)
        second.release()
    assert_no_key(masters, key + ":second")
