"""Masters given by host name (beside tests/test_name_resolution.py, which has the resolver that
never answers): names are resolved outside the rounds (src/hiredlock/_engines/resolver.py), so a
name that does not resolve costs acquire, extend and release nothing, and the master votes
CONN_ERROR with the resolver's reason; `localhost` works."""

from __future__ import annotations

import time
import uuid

from support import EXTRA_SLACK, FOREIGN, assert_no_key, assert_values

from hiredlock import Outcome

TTL = 10.0
MASTER_TIMEOUT = 0.05
QUICK = 1.0 + EXTRA_SLACK  # "well under" the seconds a blocking getaddrinfo can take


def timed(call):
    t0 = time.monotonic()
    result = call()
    return result, time.monotonic() - t0


def check_cycle(rl, servers, key, bad):
    """acquire, extend, release each succeed quickly; the named-but-unresolved master `bad`
    votes CONN_ERROR with the resolver's reason."""
    lock = rl.lock(key, TTL)
    for attempt in range(2):  # the first calls may wait once for the lookup; the later never
        got, elapsed = timed(lambda: lock.acquire(blocking=False))
        assert got and elapsed < QUICK, (attempt, got, elapsed)
        _, elapsed = timed(lock.extend)
        assert elapsed < QUICK
        _, elapsed = timed(lock.release)
        assert elapsed < QUICK
        assert_no_key(servers, key)
    # the votes: a refused acquire keeps them
    holder = f"{key}:held"
    for srv in servers:
        srv.admin().set(holder, FOREIGN)
    refused = rl.lock(holder, TTL)
    got, elapsed = timed(lambda: refused.acquire(blocking=False))
    assert not got and elapsed < QUICK
    vote = refused.last_votes[bad]
    assert vote.outcome == Outcome.CONN_ERROR, refused.last_votes
    assert "resolve" in (vote.detail or ""), vote
    states = rl.inspect(key)
    assert states[bad].outcome == Outcome.CONN_ERROR
    assert "resolve" in (states[bad].detail or "")


def test_unresolvable_master_costs_nothing(engine, masters5, make_redlock, key):
    servers = masters5[:2]
    bad_host = f"no-such-host-{uuid.uuid4().hex[:8]}.invalid"
    urls = [servers[0].url, f"redis://{bad_host}:6379/0", servers[1].url]
    rl = make_redlock(urls, master_timeout=MASTER_TIMEOUT)
    check_cycle(rl, servers, key, 1)


def test_localhost_masters(engine, masters5, make_redlock, key):
    servers = masters5[:3]
    rl = make_redlock([f"redis://localhost:{s.port}/0" for s in servers])
    lock = rl.lock(key, TTL)
    assert lock.acquire(blocking=False)
    # (eventually: the round may have ended on a quorum before the last master answered)
    assert_values(servers, key, lock.token)
    lock.extend()
    states = rl.inspect(key)
    assert [s.outcome for s in states] == [Outcome.OK] * 3
    assert all(s.ours for s in states)
    lock.release()
    assert_no_key(servers, key)
