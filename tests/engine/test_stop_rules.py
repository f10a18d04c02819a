"""The engine contract's stop rules, beside tests/test_lagging_masters.py and
tests/test_cold_connections.py:

* once the outcome is decided, a master that let an earlier round time out is not waited for (a
  stopped master does not cost every release and extend its master_timeout);
* a master whose connection opens in the round has CONNECT_TIMEOUT_MIN_MS from the round's start,
  whatever the master_timeout, while masters connected before keep the master_timeout.
"""

from __future__ import annotations

import time

import pytest
from round_support import DebugSleep

from hiredlock import QuorumUnreachable

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
