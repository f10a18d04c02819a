"""Both blocking drivers of the algorithm's steps (the C loop in hiredlock._native and
_blocking.run_python, the fallback where the extension does not load) do the same thing, on real
servers: rounds, pauses between attempts, return values, and an exception raised during a round
thrown into the steps (or raised where the direct form of a Lock's acquire and release asked for
the round: its rounds go through _blocking.run_one, which run_python uses too) so that their
unlock goes out before it propagates."""

from __future__ import annotations

import signal

import pytest
from support import assert_no_key, assert_values, debug_sleep, set_foreign, urls

import hiredlock
from hiredlock._engines import blocking as _blocking

DRIVERS = ["c", "python"]


@pytest.fixture(params=DRIVERS, ids=DRIVERS)
def driver(request, monkeypatch):
    if request.param == "c":
        if "native" not in hiredlock.available_backends():
            pytest.skip("the C driver is part of the native extension, which is not built")
        from hiredlock import _native

        run = _native.run_steps
        assert _blocking.run is run, "the C driver must be the default where the extension loads"
    else:
        run = _blocking.run_python
    # (the blocking rounds, hiredlock._engines.blocking.BlockingRounds, drive steps with `run`)
    monkeypatch.setattr(_blocking, "run", run)
    return run


def test_rounds_and_results(driver, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5), master_timeout=0.2)
    a = rl.lock(key, 10, fencing=True)
    assert a.acquire(blocking=False) is True
    assert_values(masters5, key, a.token.encode())
    assert a.fence == 1
    a.extend(5)
    assert [state.ours for state in rl.inspect(key)] == [True] * 5
    a.release()
    assert_no_key(masters5, key)
    locks = rl.acquire_many([key + ":1", key + ":2"], 10)
    assert all(locks)
    rl.release_many(locks)
    assert_no_key(masters5, key + ":1")


def test_pauses_between_attempts_until_the_deadline(driver, make_redlock, masters5, key):
    set_foreign(masters5, key)
    rl = make_redlock(urls(masters5), master_timeout=0.2, retry_delay=0.02)
    assert rl.lock(key, 10).acquire(timeout=0.1) is False


def test_an_interrupted_round_still_unlocks(driver, make_redlock, masters5, key):
    """KeyboardInterrupt from a signal handler while the masters sleep through the SET: the
    exception is thrown into the steps, whose unlock goes out before it propagates."""
    rl = make_redlock(urls(masters5), master_timeout=2.0)
    lock_ = rl.lock(key, 30)

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGALRM, interrupt)
    sleepers = debug_sleep(masters5, 0.3)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.1)
        with pytest.raises(KeyboardInterrupt):
            lock_.acquire()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        for sock in sleepers:
            sock.close()
    assert lock_.token is None
    assert_no_key(masters5, key, "the interrupted acquire left its key")
