"""The pure-Python engine on select.select() (what it uses where select.poll is missing: Windows),
against real masters: quorum with taken and dead masters, a hung connect, NOSCRIPT, release."""

from __future__ import annotations

import time

import pytest
from servers import BlackHole
from support import assert_no_key, assert_values, set_foreign, urls

from hiredlock import QuorumUnreachable, Redlock
from hiredlock._engines import poller as _poller
from hiredlock._engines import python_engine as _python_engine
from hiredlock._engines import round as _python_round


@pytest.fixture
def select_poller(monkeypatch):
    monkeypatch.setattr(_python_engine, "new_poller", _poller.SelectPoller)
    monkeypatch.setattr(_python_round, "new_poller", _poller.SelectPoller)


@pytest.fixture
def python_redlock():
    made = []

    def make(masters, **options):
        made.append(Redlock(masters, backend="python", **options))
        return made[-1]

    yield make
    for redlock in made:
        redlock.close()


@pytest.mark.parametrize("taken", [0, 1, 2, 3])
def test_quorum_on_select(select_poller, python_redlock, masters5, key, taken):
    set_foreign(masters5[:taken], key)
    rl = python_redlock(urls(masters5))
    lock = rl.lock(key, 5)
    assert lock.acquire(blocking=False) is (taken <= 2)
    if lock.held:
        assert_values(masters5[taken:], key, lock.token)
        lock.release()
    assert_no_key(masters5[taken:], key)


def test_dead_and_hung_masters_on_select(select_poller, python_redlock, masters5, key):
    hole = BlackHole()
    try:
        masters5[0].kill()
        rl = python_redlock([*urls(masters5[1:4]), masters5[0].url, hole.url], master_timeout=0.05)
        lock = rl.lock(key, 5)
        start = time.monotonic()
        assert lock.acquire(blocking=False)
        assert time.monotonic() - start < 0.05 + 0.1
        lock.release()
        assert_no_key(masters5[1:4], key)
        masters5[2].kill()
        with pytest.raises(QuorumUnreachable):
            rl.lock(key + ":2", 5).acquire(blocking=False)
    finally:
        hole.close()


def test_noscript_fallback_on_select(select_poller, python_redlock, masters5, key):
    rl = python_redlock(urls(masters5))
    lock = rl.lock(key, 5)
    assert lock.acquire(blocking=False)
    for master in masters5:
        master.admin().script_flush()
    lock.extend(10)
    lock.release()
    assert_no_key(masters5, key)
