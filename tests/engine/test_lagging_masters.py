"""A release or an extend waits for the masters whose answer it needs.

A master that let an earlier round time out (it "lags": it still owes that round's reply) is not
waited for once an outcome is decided, but while a key is undecided it is: skipping a master whose
answer can change the outcome would be a false failure (a LockLost for a lock that is held).
"""

from __future__ import annotations

import pytest
from support import assert_no_key, assert_pttl_between, debug_sleep, urls

from hiredlock import LockLost

MASTER_TIMEOUT = 0.5
# The sleeping masters make the first round time out (after MASTER_TIMEOUT) and wake up in the
# middle of the second one: about 0.25 s of margin on either side.
SLEEP_S = 0.8
TTL = 10.0


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
