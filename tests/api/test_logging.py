"""Logs: under hiredlock.* loggers by subject; DEBUG per failed attempt and per failed master;
nothing above DEBUG for a normal contended wait; passwords never shown. Both engines, both APIs."""

from __future__ import annotations

import logging

import pytest
from apis import make_redlock_fixture, pytest_generate_tests  # noqa: F401  (sync and async APIs)
from support import SECRET, assert_hidden, set_foreign, urls

from hiredlock import QuorumUnreachable


def test_a_contended_wait_logs_each_attempt_at_debug_only(
    engine, make_redlock, masters5, key, caplog
):
    set_foreign(masters5, key, px=300)
    rl = make_redlock(urls(masters5), retry_delay=0.05)
    caplog.set_level(logging.DEBUG, logger="hiredlock")
    lock = rl.lock(key, 10, wake=False)
    assert lock.acquire(timeout=10)
    lock.release()
    attempts = [r for r in caplog.records if r.name == "hiredlock.lock" and "attempt" in r.message]
    assert len(attempts) == lock.stats.attempts - 1 >= 1
    assert all(r.levelno == logging.DEBUG for r in caplog.records), [
        (r.name, r.levelname, r.message) for r in caplog.records if r.levelno > logging.DEBUG
    ]
    assert key in attempts[0].message and "TAKEN" in attempts[0].message


def test_a_failed_master_is_logged_at_debug_by_name(engine, make_redlock, redis_factory, caplog):
    servers = redis_factory(3)
    servers[2].kill()
    rl = make_redlock(urls(servers))
    caplog.set_level(logging.DEBUG, logger="hiredlock")
    with rl.lock("n", 10):
        pass
    failed = [r for r in caplog.records if r.name == "hiredlock.masters"]
    assert {r.levelno for r in failed} == {logging.DEBUG}
    assert any(f":{servers[2].port}/" in r.message and "CONN_ERROR" in r.message for r in failed)
    assert {r.message.split(" of ")[0].split()[-1] for r in failed} == {"acquire", "release"}


def test_nothing_is_logged_when_debug_is_off(engine, make_redlock, redis_factory, caplog):
    servers = redis_factory(3)
    servers[2].kill()
    rl = make_redlock(urls(servers), retry_delay=0.01)
    caplog.set_level(logging.INFO, logger="hiredlock")
    lock = rl.lock("n", 10)
    with lock:
        assert not rl.lock("n", 10).acquire(timeout=0.1)
    assert caplog.records == []


@pytest.mark.parametrize("masters_down", [1, 2])
def test_logs_never_show_a_password(engine, make_redlock, redis_factory, caplog, masters_down):
    servers = redis_factory(3)
    for server in servers:
        server.set_password(SECRET)
    for server in servers[:masters_down]:
        server.kill()
    masters = [f"redis://:{SECRET}@127.0.0.1:{server.port}/0" for server in servers]
    rl = make_redlock(masters, retry_count=2, retry_delay=0.01)
    caplog.set_level(logging.DEBUG, logger="hiredlock")
    if masters_down == 1:
        with rl.lock("n", 10):
            pass
    else:
        with pytest.raises(QuorumUnreachable):
            rl.lock("n", 10).acquire()
    assert any(r.name == "hiredlock.masters" for r in caplog.records)
    assert_hidden(caplog.text)
