"""The lock's own lifecycle: re-acquiring after expiry or loss, the errors users catch, renewal that
survives a blip, configuration errors that fail fast, the decorator's refusals, fence counters."""

from __future__ import annotations

import threading
import time

import pytest
from aio_support import run_async  # noqa: F401  (the fixture)
from apis import make_redlock_fixture, pytest_generate_tests, sync_only  # noqa: F401  (both APIs)
from features_support import MT, pttls
from support import assert_values, braced, set_foreign, urls, wait_until

from hiredlock import (
    AlreadyAcquired,
    HiredlockError,
    Lock,
    LockLost,
    MasterConfigError,
    NotHeld,
    Outcome,
    QuorumUnreachable,
    Redlock,
)
from hiredlock._core.lock_state import LockState
from hiredlock.aio import AsyncLock, AsyncRedlock

# -- how a lock object is made ---------------------------------------------------------------------


def assert_made_alike(made, called) -> None:
    """`made` (a client's lock()) has every field `called` (the class's call) has: equal values,
    and a gate of its own, of the same type, on the client's state mutex (see
    _core/state_mutex.py: one per client, shared by its lock objects)."""
    for field in LockState.__slots__:
        if field == "__weakref__":
            continue
        mine, theirs = getattr(made, field), getattr(called, field)
        if field == "_gate":  # (one of its own per object)
            assert type(mine) is type(theirs) and mine is not theirs, field
        else:
            assert mine == theirs, field
    assert made._mutex is called._mutex is made._session.state_mutex


def test_redlock_lock_makes_the_lock_its_class_makes(engine, masters5, key):
    """Redlock.lock's usual call allocates its Lock without the class's call (_lock.new_lock, which
    runs what LockState's __init__ runs): the object is the one Lock(redlock, name, ttl) makes,
    field by field, and it works the same. Lock must keep LockState's __init__ for that."""
    assert Lock.__init__ is LockState.__init__
    rl = Redlock(urls(masters5[:3]), backend=engine, master_timeout=MT)
    try:
        made, called = rl.lock(key, 10), Lock(rl, key, 10)
        assert type(made) is Lock
        assert_made_alike(made, called)
        assert made._gate._mutex is made._mutex  # (the gate shares the state's mutex)
        with made:
            assert made.held and not called.acquire(blocking=False)
        assert called.acquire(blocking=False)
        called.release()
    finally:
        rl.close()


def test_async_redlock_lock_makes_the_lock_its_class_makes(engine, masters5, key, run_async):  # noqa: F811
    """The same for AsyncRedlock.lock and AsyncLock (aio/_lock.py's new_async_lock)."""
    assert AsyncLock.__init__ is LockState.__init__

    async def main() -> None:
        rl = AsyncRedlock(urls(masters5[:3]), backend=engine, master_timeout=MT)
        try:
            made, called = rl.lock(key, 10), AsyncLock(rl, key, 10)
            assert type(made) is AsyncLock
            assert_made_alike(made, called)
            async with made:
                assert made.held and not await called.acquire(blocking=False)
            assert await called.acquire(blocking=False)
            await called.release()
        finally:
            await rl.aclose()

    run_async(main())


# -- a Lock that is not held can be acquired ------------------------------------------------------


def test_an_expired_lock_can_be_acquired_again(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5[:3]), master_timeout=MT)
    lock = rl.lock(key, 0.3)
    assert lock.acquire(blocking=False)
    first = lock.token
    wait_until(lambda: not lock.held, 2, "the lock's validity ran out")
    wait_until(lambda: all(v == -2 for v in pttls(masters5[:3], key)), 2, "the keys expired")
    assert lock.acquire(blocking=False), "a lock whose ttl ran out must be acquirable again"
    assert lock.held and lock.token != first
    lock.release()


def test_a_lock_lost_by_extend_and_one_expired_behave_the_same(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5[:3]), master_timeout=MT)
    lost = rl.lock(key, 5)
    assert lost.acquire(blocking=False)
    assert_values(masters5[:3], key, lost.token)  # (no late SET re-creates the key)
    for server in masters5[:3]:
        server.admin().delete(key)
    with pytest.raises(LockLost):
        lost.extend()
    assert not lost.held
    assert lost.acquire(blocking=False)
    lost.release()


def test_acquiring_a_held_lock_raises_a_runtime_error(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5[:3]), master_timeout=MT)
    lock = rl.lock(key, 5)
    assert lock.acquire(blocking=False)
    with pytest.raises(AlreadyAcquired) as caught:
        lock.acquire(blocking=False)
    assert isinstance(caught.value, RuntimeError) and isinstance(caught.value, HiredlockError)
    assert repr(key) in str(caught.value)
    assert lock.held, "the failed second acquire must leave the first one held"
    lock.release()


# -- blocking_timeout bounds acquire() too ------------------------------------------------------


def test_blocking_timeout_bounds_acquire(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5[:3]), master_timeout=MT, retry_delay=0.02)
    set_foreign(masters5[:3], key)
    lock = rl.lock(key, 5, blocking_timeout=0.3)
    done = threading.Event()
    result: list = []

    def take() -> None:
        result.append(lock.acquire())
        done.set()

    thread = threading.Thread(target=take, daemon=True)
    thread.start()
    # Without the bound this would wait for ever (the foreign key lives 60 s).
    assert done.wait(10), "acquire() ignored blocking_timeout"
    assert result == [False]


def test_an_explicit_timeout_wins_over_blocking_timeout(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5[:3]), master_timeout=MT, retry_delay=0.02)
    set_foreign(masters5[:3], key)
    lock = rl.lock(key, 5, blocking_timeout=30)
    started = time.monotonic()
    assert lock.acquire(timeout=0.2) is False
    assert time.monotonic() - started < 10, "the explicit timeout did not win"
    assert lock.acquire(blocking=False) is False  # blocking=False ignores blocking_timeout


def test_rlock_acquire_honours_blocking_timeout(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5[:3]), master_timeout=MT, retry_delay=0.02)
    set_foreign(masters5[:3], key)
    rlock = rl.rlock(key, 5, blocking_timeout=0.2)
    outcome: list = []
    thread = threading.Thread(target=lambda: outcome.append(rlock.acquire()), daemon=True)
    thread.start()
    thread.join(10)
    assert outcome == [False], "RLock.acquire() ignored blocking_timeout"


# -- renewal survives a blip ----------------------------------------------------------------


def test_renewal_survives_a_short_pause_of_a_majority(engine, make_redlock, masters5, key):
    """3 of 5 masters paused for 300 ms while a renewal is due: the renewal is retried within the
    validity left (2 s or more), instead of declaring the lock lost."""
    rl = make_redlock(urls(masters5), master_timeout=0.05)
    lock_lost_calls: list = []
    lock = rl.lock(key, 3, auto_renew=True, on_lost=lock_lost_calls.append)
    assert lock.acquire(blocking=False)
    # The first renewal is due at about ttl/3 = 1 s: pause 3 masters from 0.9 s to 1.2 s.
    time.sleep(0.9)
    for server in masters5[:3]:
        server.admin().execute_command("CLIENT", "PAUSE", 300, "ALL")
    time.sleep(0.3)
    # After the pause the key must be renewed (PTTL back near 3 s) with the lock never lost.
    wait_until(
        lambda: all(v > 2500 for v in pttls(masters5, key)) or lock.lost.is_set(),
        4,
        "a renewal after the pause",
    )
    assert not lock.lost.is_set(), f"the lock was declared lost: {lock.last_votes}"
    assert not lock_lost_calls
    assert lock.held
    lock.release()


def test_renewal_gives_up_at_once_when_a_majority_says_the_key_is_gone(
    engine, make_redlock, masters5, key
):
    rl = make_redlock(urls(masters5[:3]), master_timeout=MT)
    lost = threading.Event()
    lock = rl.lock(key, 0.6, auto_renew=True, on_lost=lambda lk: lost.set())
    assert lock.acquire(blocking=False)
    assert_values(masters5[:3], key, lock.token)  # (no late SET re-creates the key)
    for server in masters5[:3]:
        server.admin().delete(key)
    assert lost.wait(5), "a renewal that a majority refused must mark the lock lost"
    assert lock.lost.is_set() and not lock.held
    assert all(vote.outcome is Outcome.TAKEN for vote in lock.last_votes)


# -- configuration errors fail fast -----------------------------------------------------------


@pytest.fixture
def password_masters(masters5):
    """Three masters that require the password "right" (the masters5 fixture clears it after)."""
    for server in masters5[:3]:
        server.set_password("right")
    return masters5[:3]


def _url_with_password(server, password: str) -> str:
    return f"redis://:{password}@127.0.0.1:{server.port}/0"


def test_a_wrong_password_on_a_majority_raises_at_once(engine, make_redlock, password_masters, key):
    masters = [_url_with_password(server, "not-the-s3cret") for server in password_masters]
    rl = make_redlock(masters, master_timeout=MT, retry_count=50, retry_delay=0.5)
    lock = rl.lock(key, 5)
    started = time.monotonic()
    with pytest.raises(MasterConfigError) as caught:
        lock.acquire()
    # retry_count=50 with 0.5 s between tries would take 25 s: one attempt is enough to know.
    assert time.monotonic() - started < 5
    assert isinstance(caught.value, QuorumUnreachable)
    assert "WRONGPASS" in str(caught.value)
    assert "not-the-s3cret" not in str(caught.value)


def test_a_wrong_password_on_a_minority_does_not_stop_the_lock(
    engine, make_redlock, password_masters, key
):
    good = [_url_with_password(server, "right") for server in password_masters[:2]]
    masters = [*good, _url_with_password(password_masters[2], "not-the-s3cret")]
    rl = make_redlock(masters, master_timeout=MT)
    lock = rl.lock(key, 5)
    assert lock.acquire(blocking=False)
    lock.release()


# -- the decorator never runs a body unlocked ------------------------------------------------------


@sync_only("Redlock.synchronized refuses what AsyncRedlock.synchronized is for (coroutines)")
def test_synchronized_refuses_coroutine_and_generator_functions(engine, make_redlock, masters5):
    rl = make_redlock(urls(masters5[:3]))
    decorate = rl.synchronized("sync-only", 5)

    async def coroutine_function() -> None:
        pass

    def generator_function():
        yield 1

    async def async_generator_function():
        yield 1

    for func in (coroutine_function, generator_function, async_generator_function):
        with pytest.raises(TypeError, match=func.__name__):
            decorate(func)


# -- fence counters ---------------------------------------------------------------------------


def client_with_a_fence_counter(make_redlock, masters, key):
    """A client of `masters` whose fenced lock on `key` was taken and released: (the client,
    the fence counter's key, now on every master)."""
    rl = make_redlock(urls(masters), master_timeout=MT)
    lock = rl.lock(key, 5, fencing=True)
    assert lock.acquire(blocking=False)
    lock.release()
    return rl, b"hiredlock:fence:" + braced(key)


def test_a_fence_counter_can_be_deleted_when_its_resource_is_retired(
    engine, make_redlock, masters5, key
):
    rl, counter = client_with_a_fence_counter(make_redlock, masters5[:3], key)
    assert all(server.admin().exists(counter) for server in masters5[:3])
    rl.delete_fence_counter(key)
    assert not any(server.admin().exists(counter) for server in masters5[:3])


def test_deleting_the_fence_counter_of_a_held_lock_is_refused(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5[:3]), master_timeout=MT)
    lock = rl.lock(key, 5, fencing=True)
    assert lock.acquire(blocking=False)
    with pytest.raises(HiredlockError, match="held"):
        rl.delete_fence_counter(key)
    lock.release()


def test_deleting_a_fence_counter_with_a_majority_stopped_is_quorum_unreachable(
    engine, make_redlock, masters5, key
):
    rl, counter = client_with_a_fence_counter(make_redlock, masters5[:3], key)
    for server in masters5[1:3]:
        server.stop()
    try:
        with pytest.raises(QuorumUnreachable, match="could not be deleted on a quorum"):
            rl.delete_fence_counter(key)
    finally:
        for server in masters5[1:3]:
            server.cont()
    assert not masters5[0].admin().exists(counter)  # (the one master that answered deleted it)


def test_release_after_expiry_still_raises_not_held_or_lock_lost(
    engine, make_redlock, masters5, key
):
    rl = make_redlock(urls(masters5[:3]), master_timeout=MT)
    lock = rl.lock(key, 0.2)
    assert lock.acquire(blocking=False)
    wait_until(lambda: all(v == -2 for v in pttls(masters5[:3], key)), 2, "the keys expired")
    with pytest.raises(LockLost):
        lock.release()
    with pytest.raises(NotHeld):
        lock.release()


def test_acquire_on_a_closed_redlock_raises_and_logs_nothing(
    engine, make_redlock, masters5, key, caplog
):
    rl = make_redlock(urls(masters5[:3]), master_timeout=MT)
    lock = rl.lock(key, 5)
    rl.close()
    assert rl.closed
    with (
        caplog.at_level("DEBUG", logger="hiredlock"),
        pytest.raises(HiredlockError, match="closed"),
    ):
        lock.acquire(blocking=False)
    assert not caplog.records, [record.getMessage() for record in caplog.records]
