"""Masters given by host name.  Names are resolved outside the rounds (the engines' resolver):

* a name whose lookup hangs costs a round at most its master_timeout, and the master votes
  CONN_ERROR with the resolver's reason; a quorum does not wait for it;
* engines start the lookups of their masters' names when they are made;
* a lookup that fails after one that answered leaves the last address serving until its stale
  lifetime ends;
* a name that does not resolve costs acquire, extend and release nothing, and the master votes
  CONN_ERROR with the resolver's reason; `localhost` works.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid

import pytest
from apis import api_fixture, both_apis, make_redlock_fixture  # noqa: F401
from support import (
    EXTRA_SLACK,
    FOREIGN,
    assert_no_key,
    assert_values,
    attempt_votes,
    urls,
    wait_until,
)

from hiredlock import Outcome, QuorumUnreachable
from hiredlock._core.masters import MasterSpec
from hiredlock._engines import resolver as _resolver
from hiredlock._engines.selection import engine_class

SLOW_DOMAIN = ".hl-slow-resolve.test"
MASTER_TIMEOUT = 0.05
BOUND = 1.0 + EXTRA_SLACK  # well under the 5 s the lookup hangs for


@pytest.fixture
def hanging_lookups(monkeypatch):
    """getaddrinfo() of names under SLOW_DOMAIN hangs (5 s at most), then answers 127.0.0.1;
    yields an Event set when such a lookup starts."""
    started = threading.Event()
    release = threading.Event()
    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        if isinstance(host, str) and host.endswith(SLOW_DOMAIN):
            started.set()
            release.wait(5)
            host = "127.0.0.1"
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    yield started
    release.set()


def slow_name() -> str:
    return uuid.uuid4().hex[:12] + SLOW_DOMAIN  # never looked up before in this process


def test_hanging_lookup_costs_one_master_timeout(engine, make_redlock, masters5, hanging_lookups):
    host = slow_name()
    rl = make_redlock([f"redis://{host}:{masters5[0].port}/0"], master_timeout=MASTER_TIMEOUT)
    start = time.monotonic()
    with pytest.raises(QuorumUnreachable) as info:
        rl.lock("slow-name", 10).acquire(blocking=False)
    assert time.monotonic() - start < BOUND
    (vote,) = info.value.votes
    assert vote.outcome == Outcome.CONN_ERROR, vote
    assert "resolve" in vote.detail and host in vote.detail, vote


def test_quorum_does_not_wait_for_a_hanging_lookup(
    engine, make_redlock, masters5, key, hanging_lookups
):
    slow = f"redis://{slow_name()}:{masters5[0].port}/0"
    rl = make_redlock([slow, *urls(masters5[1:3])], master_timeout=MASTER_TIMEOUT)
    lock = rl.lock(key, 10)
    start = time.monotonic()
    assert lock.acquire(blocking=False)
    assert time.monotonic() - start < BOUND
    lock.release()


def test_engine_starts_lookups_when_made(engine, masters5, hanging_lookups):
    spec = MasterSpec(host=slow_name(), port=masters5[0].port)
    made = engine_class(engine)([spec], 1)
    try:
        assert hanging_lookups.wait(5), "no lookup was started for the master's name"
    finally:
        made.close()


def test_names_that_resolve_work(engine, make_redlock, masters5, key):
    rl = make_redlock([f"redis://localhost:{m.port}/0" for m in masters5[:3]])
    lock = rl.lock(key, 10)
    assert lock.acquire(blocking=False)
    lock.release()


FLAKY_DOMAIN = ".hl-flaky-resolve.test"
# How long the last address of a name keeps serving while its lookups fail: the documented 5
# minutes (_resolver.STALE_LIFETIME_S), shortened for these tests.
STALE_S = 3.0


@pytest.fixture
def flaky_lookups(monkeypatch):
    """getaddrinfo() of names under FLAKY_DOMAIN answers 127.0.0.1 while the Event it yields is
    set, and fails (EAI_AGAIN, as a DNS server that does not answer) while it is clear."""
    up = threading.Event()
    up.set()
    real = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        if isinstance(host, str) and host.endswith(FLAKY_DOMAIN):
            if not up.is_set():
                raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
            host = "127.0.0.1"
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return up


@both_apis
def test_failed_refresh_keeps_the_last_address(
    engine, api, make_redlock, masters5, key, flaky_lookups, monkeypatch
):
    """The name answered, then its lookups fail: a client made then still reaches the master at
    the last address (the lookups are shared by the process), until that answer's stale
    lifetime ends; then a new client's master votes CONN_ERROR with the resolver's reason."""
    monkeypatch.setattr(_resolver, "STALE_LIFETIME_S", STALE_S)
    host = uuid.uuid4().hex[:12] + FLAKY_DOMAIN
    port = masters5[0].port
    url = f"redis://{host}:{port}/0"
    made_at = time.monotonic()  # the name's first answer came after this
    assert attempt_votes(make_redlock([url], master_timeout=MASTER_TIMEOUT), key) == (True, [])
    answered_at = time.monotonic()  # ... and before this

    flaky_lookups.clear()
    _resolver.refresh((host, port))  # (what an engine does when a master fails it)
    wait_until(lambda: _resolver._entries[(host, port)].error, 5, "the failed lookup")
    during = make_redlock([url], master_timeout=MASTER_TIMEOUT)
    assert attempt_votes(during, key) == (True, [])
    assert masters5[0].admin().get(key) is None  # taken on the master, and released
    assert time.monotonic() < made_at + STALE_S, "too slow for STALE_S"

    # Past the stale lifetime (nothing waits for it but time), the failure is the vote.
    time.sleep(max(0.0, answered_at + STALE_S - time.monotonic()))
    got, votes = attempt_votes(make_redlock([url], master_timeout=MASTER_TIMEOUT), key)
    assert not got, votes
    ((outcome, detail),) = votes
    assert outcome == Outcome.CONN_ERROR and f"cannot resolve {host!r}" in detail, votes


# -- names that do not resolve, localhost ----------------------------------------------------------


TTL = 10.0
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
