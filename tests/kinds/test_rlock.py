"""RLock.  The owning thread acquires it again and again (counting); the masters keep
the key until the last release; another thread (same RLock object, or another client's RLock)
cannot acquire it in between and can right after."""

from __future__ import annotations

import threading

import pytest
from apis import make_redlock_fixture, pytest_generate_tests  # noqa: F401  (sync and async APIs)
from features_support import MT, leakcheck_fixture  # noqa: F401  (fixture)
from support import assert_no_key, assert_values, urls

from hiredlock import NotHeld


def try_in_threads(contenders, timeout):
    """Runs acquire(timeout=...) of each RLock in its own thread, all at once; a thread that
    acquires releases at once.  Returns the results in order (True/False or the exception)."""
    results = [None] * len(contenders)

    def run(i, rlk):
        try:
            got = rlk.acquire(timeout=timeout)
            results[i] = got
            if got:
                assert rlk.count == 1 and rlk.held
                rlk.release()
        except BaseException as exc:
            results[i] = exc

    ts = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(contenders)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert not any(t.is_alive() for t in ts)
    return results


def test_reentrant_three_deep(engine, make_redlock, masters5, key, leakcheck):
    rl = make_redlock(urls(masters5), master_timeout=MT, retry_delay=0.05)
    other_rl = make_redlock(urls(masters5), master_timeout=MT, retry_delay=0.05)
    rlock = rl.rlock(key, 10)
    rival = other_rl.rlock(key, 10)  # another client of the same name
    assert rlock.count == 0 and not rlock.held and rlock.lock is None

    assert rlock.acquire()
    inner = rlock.lock
    token = inner.token
    assert rlock.count == 1 and rlock.held
    assert_values(masters5, key, token)
    assert rlock.acquire(timeout=1)
    assert rlock.acquire(blocking=False)
    assert rlock.count == 3
    assert rlock.lock is inner and inner.token == token, "re-acquiring took a new lock"
    assert_values(masters5, key, token)

    for expected_count in (3, 2, 1):
        assert rlock.count == expected_count
        # Held: neither a sibling thread (same RLock) nor another client gets it.
        assert try_in_threads([rlock, rival], timeout=0.3) == [False, False]
        assert_values(masters5, key, token, f"at count {expected_count}")
        rlock.release()
        if expected_count > 1:
            assert rlock.held and rlock.count == expected_count - 1
            assert_values(masters5, key, token, f"after a release at count {expected_count}")

    assert rlock.count == 0 and not rlock.held and rlock.lock is None
    assert_no_key(masters5, key, "after the last release")
    with pytest.raises(NotHeld):
        rlock.release()
    # Free now: both a sibling thread and the other client take it at once.
    assert try_in_threads([rlock], timeout=2) == [True]
    assert try_in_threads([rival], timeout=2) == [True]
    assert_no_key(masters5, key)
    leakcheck.close_and_check(rl, other_rl)


def test_release_by_non_owner_thread_refused(engine, make_redlock, masters5, key, leakcheck):
    rl = make_redlock(urls(masters5), master_timeout=MT)
    rlock = rl.rlock(key, 10)
    assert rlock.acquire()
    errors = []

    def intruder():
        try:
            rlock.release()
        except NotHeld:
            errors.append("NotHeld")
        except BaseException as exc:
            errors.append(repr(exc))

    t = threading.Thread(target=intruder)
    t.start()
    t.join(10)
    assert errors == ["NotHeld"]
    assert rlock.count == 1 and rlock.held
    assert_values(masters5, key, rlock.lock.token)
    rlock.release()
    assert_no_key(masters5, key)
    leakcheck.close_and_check(rl)


def test_rlock_with_statement_nested(engine, make_redlock, masters5, key, leakcheck):
    rl = make_redlock(urls(masters5), master_timeout=MT)
    rlock = rl.rlock(key, 10, blocking_timeout=1)
    with rlock:
        token = rlock.lock.token
        with rlock:
            assert rlock.count == 2
            with rlock:
                assert rlock.count == 3
                assert_values(masters5, key, token)
            assert_values(masters5, key, token)
        assert rlock.count == 1
        assert_values(masters5, key, token)
    assert rlock.count == 0
    assert_no_key(masters5, key)
    leakcheck.close_and_check(rl)
