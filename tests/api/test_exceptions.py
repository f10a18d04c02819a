"""An exception raised inside `with lock:` (Lock and RLock) or inside a function
decorated with @rl.synchronized releases the lock and propagates unchanged; KeyboardInterrupt
too.  After each, the key is gone from every master and a rival acquires at once."""

from __future__ import annotations

import pytest
from apis import make_redlock_fixture, pytest_generate_tests  # noqa: F401  (sync and async APIs)
from features_support import MT, leakcheck_fixture, script_calls  # noqa: F401  (the leakcheck fixture)
from support import EVENTUAL, assert_no_key, assert_values, urls, wait_until

from hiredlock import LockNotAcquired


class Boom(Exception):
    pass


EXCEPTIONS = [
    pytest.param(Boom, id="exception"),
    pytest.param(KeyboardInterrupt, id="keyboardinterrupt"),
]


def raise_and_catch(exc_type, fn):
    """Calls fn(), which must raise exc_type (the very instance it raised is returned)."""
    try:
        fn()
    except exc_type as exc:  # KeyboardInterrupt is caught here, not by pytest
        return exc
    raise AssertionError(f"{exc_type.__name__} did not propagate")


def assert_free(rl, masters, key):
    assert_no_key(masters, key, "after the exception")
    rival = rl.lock(key, 5)
    assert rival.acquire(blocking=False), "the lock is still taken after the exception"
    rival.release()


@pytest.mark.parametrize("exc_type", EXCEPTIONS)
def test_with_lock_releases_and_propagates(
    engine, make_redlock, masters5, key, leakcheck, exc_type
):
    rl = make_redlock(urls(masters5), master_timeout=MT)
    lock = rl.lock(key, 10, blocking_timeout=1)
    raised = exc_type("from the body")
    seen = {}

    def body():
        with lock as lk:
            assert lk is lock
            seen["token"] = lock.token
            assert_values(masters5, key, lock.token)
            raise raised

    got = raise_and_catch(exc_type, body)
    assert got is raised
    assert seen["token"]
    assert not lock.held and lock.token is None
    assert_free(rl, masters5, key)
    leakcheck.close_and_check(rl)


@pytest.mark.parametrize("exc_type", EXCEPTIONS)
def test_with_auto_renewed_lock_releases_and_stops_renewal(
    engine, make_redlock, masters5, key, leakcheck, exc_type
):
    import time

    rl = make_redlock(urls(masters5), master_timeout=MT)
    lock = rl.lock(key, 1, auto_renew=True, blocking_timeout=1)

    def body():
        with lock:
            raise exc_type("boom")

    raise_and_catch(exc_type, body)
    assert_free(rl, masters5, key)
    before = script_calls(masters5)
    time.sleep(0.6)  # observation window: > one renewal interval (1/3 s)
    assert script_calls(masters5) == before, "a renewal was sent after the exception released it"
    assert not lock.lost.is_set()
    leakcheck.close_and_check(rl)


@pytest.mark.parametrize("exc_type", EXCEPTIONS)
def test_with_rlock_releases_and_propagates(
    engine, make_redlock, masters5, key, leakcheck, exc_type
):
    rl = make_redlock(urls(masters5), master_timeout=MT)
    rlock = rl.rlock(key, 10, blocking_timeout=1)

    def body():
        with rlock, rlock:
            assert rlock.count == 2
            raise exc_type("nested")

    raise_and_catch(exc_type, body)
    assert rlock.count == 0 and not rlock.held
    assert_free(rl, masters5, key)
    leakcheck.close_and_check(rl)


@pytest.mark.parametrize("exc_type", EXCEPTIONS)
@pytest.mark.parametrize("naming", ["static", "callable"])
def test_synchronized_releases_and_propagates(
    engine, make_redlock, masters5, key, leakcheck, exc_type, naming
):
    rl = make_redlock(urls(masters5), master_timeout=MT)
    seen = []
    name = key if naming == "static" else (lambda order_id, **kw: f"{key}:{order_id}")
    locked_key = key if naming == "static" else f"{key}:42"

    @rl.synchronized(name, 10, blocking_timeout=1)
    def work(order_id, *, fail):
        """docstring kept"""
        # acquire returns once a quorum answered; the other masters follow (poll briefly)
        values = wait_until(
            lambda: (lambda v: v if None not in v and len(set(v)) == 1 else None)(
                [m.admin().get(locked_key) for m in masters5]
            ),
            EVENTUAL,
            f"every master holds the lock {locked_key!r} inside the function",
        )
        seen.append(values)
        if fail:
            raise exc_type(f"order {order_id}")
        return order_id * 2

    assert work.__name__ == "work" and work.__doc__ == "docstring kept"
    assert work(42, fail=False) == 84
    assert all(v is not None and v == seen[0][0] for v in seen[0]), seen
    assert_no_key(masters5, locked_key)
    exc = raise_and_catch(exc_type, lambda: work(42, fail=True))
    assert str(exc) == "order 42"
    assert all(v is not None for v in seen[1]), "the function ran without the lock"
    assert_free(rl, masters5, locked_key)
    assert work(42, fail=False) == 84  # usable again
    leakcheck.close_and_check(rl)


def test_with_lock_not_acquired_does_not_run_body(engine, make_redlock, masters5, key, leakcheck):
    rl = make_redlock(urls(masters5), master_timeout=MT, retry_delay=0.05)
    holder = rl.lock(key, 10)
    assert holder.acquire(blocking=False)
    ran = []

    @rl.synchronized(key, 10, blocking_timeout=0.2)
    def work():
        ran.append(1)

    with pytest.raises(LockNotAcquired):
        work()
    with pytest.raises(LockNotAcquired), rl.lock(key, 10, blocking_timeout=0.2):
        ran.append(2)
    assert ran == []
    assert_values(masters5, key, holder.token)
    holder.release()
    leakcheck.close_and_check(rl)
