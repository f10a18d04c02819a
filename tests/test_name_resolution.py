"""Host names are resolved outside the rounds: a name whose lookup hangs costs a round at most its
master_timeout, and the master votes CONN_ERROR with the resolver's reason; engines start the
lookups of their masters' names when they are made."""

from __future__ import annotations

import socket
import threading
import time
import uuid

import pytest
from support import EXTRA_SLACK, urls

from hiredlock import Outcome, QuorumUnreachable
from hiredlock._backend import engine_class
from hiredlock._config import MasterSpec

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
