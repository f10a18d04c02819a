"""Multilocks: Redlock.multilock(names, ttl) is one lock over several names, taken only if all of
them are (on each master one script takes all of them or none; held when a quorum took them
all), released together, extended together, and never deadlocked by another multilock that
shares names in another order. On both engines and both APIs (support/apis.py's facade)."""

from __future__ import annotations

import threading
import time

import pytest
from apis import make_redlock_fixture, pytest_generate_tests  # noqa: F401
from features_support import MT, lock_keys
from support import (
    assert_no_key,
    assert_values,
    open_connections,
    urls,
    values,
)
from test_wake import SLOW_RETRY, InThread, Waiter, assert_woken, wait_subscribed

import hiredlock
import hiredlock.aio
from hiredlock import LockLost, LockNotAcquired, NotHeld, Outcome


def names_of(key, n=3):
    return [f"{key}:{i}" for i in range(n)]


def test_takes_every_name_and_releases_them_together(api, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    open_connections(rl)
    names = names_of(key)
    lock = rl.multilock(names, 30)
    expected = hiredlock.MultiLock if api == "sync" else hiredlock.aio.AsyncMultiLock
    assert type(getattr(lock, "_target", lock)) is expected
    assert lock.name == tuple(names) and lock.keys == tuple(n.encode() for n in names)
    assert lock.acquire(blocking=False)
    assert lock.held and 29 < lock.validity <= 30
    for name in names:
        assert_values(masters5, name, lock.token)  # one token on every name
    lock.release()
    assert not lock.held
    for name in names:
        assert_no_key(masters5, name, "after release()")
    with pytest.raises(NotHeld):
        lock.release()


def test_one_name_taken_takes_none_and_leaves_nothing(api, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    open_connections(rl)
    names = names_of(key)
    other = rl.lock(names[1], 30)
    assert other.acquire(blocking=False)
    lock = rl.multilock(names, 30)
    assert lock.acquire(blocking=False) is False
    assert [vote.outcome for vote in lock.last_votes].count(Outcome.TAKEN) >= 3
    assert_no_key(masters5, names[0], "a name of the failed multilock")
    assert_no_key(masters5, names[2], "a name of the failed multilock")
    assert_values(masters5, names[1], other.token)  # the other holder's key is untouched
    with pytest.raises(LockNotAcquired), rl.multilock(names, 30, blocking_timeout=0.2):
        pytest.fail("the body ran without the lock")
    other.release()
    with rl.multilock(names, 30, blocking_timeout=5) as held:
        assert held.held
    assert all(not lock_keys(m) for m in masters5), [lock_keys(m) for m in masters5]


def test_held_on_a_minority_of_masters_is_not_held(api, make_redlock, masters5, key):
    """A name taken on 3 of 5 masters by another holder leaves the multilock no quorum of masters
    with every name."""
    names = names_of(key, 2)
    for server in masters5[:3]:
        server.admin().set(names[0], "x" * 40, px=30_000)
    rl = make_redlock(urls(masters5))
    assert rl.multilock(names, 30).acquire(blocking=False) is False
    assert_no_key(masters5, names[1])


def test_extend_and_auto_renew_cover_every_name(api, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    open_connections(rl)
    names = names_of(key)
    lock = rl.multilock(names, 5)
    assert lock.acquire(blocking=False)
    lock.extend(60)
    for server in masters5:
        assert all(55_000 < server.admin().pttl(name) <= 60_000 for name in names)
    # one name gone on a majority: the multilock is lost, and the others are not re-armed there
    for server in masters5[:3]:
        server.admin().delete(names[2])
    with pytest.raises(LockLost):
        lock.extend(30)
    assert lock.lost.is_set()
    with pytest.raises(LockLost):
        lock.release()
    for name in names:
        assert_no_key(masters5, name)

    renewed = rl.multilock(names, 1.0, auto_renew=True)
    assert renewed.acquire(blocking=False)
    assert renewed.lost.wait(2.5) is False  # (over two ttls: held only if renewed)
    assert renewed.held
    for name in names:
        assert_values(masters5, name, renewed.token)
    renewed.release()


def test_a_release_of_any_name_wakes_a_waiter(api, make_redlock, masters5, key):
    """The waiter's timer is 10 to 30 s: it gets the lock right after the release of the one
    name it waited for, woken by the release notice on that name's channel."""
    names = names_of(key)
    holder_client = make_redlock(urls(masters5), master_timeout=MT)
    open_connections(holder_client)
    holder = holder_client.lock(names[2], 60)
    assert holder.acquire(blocking=False)
    rl = make_redlock(urls(masters5), master_timeout=MT, retry_delay=SLOW_RETRY)
    open_connections(rl)
    lock = rl.multilock(names, 60)
    waiter = Waiter(lock.acquire, timeout=8.0)
    wait_subscribed(masters5, names[2])
    released = time.monotonic()
    holder.release()
    assert_woken(waiter, released)
    lock.release()


@pytest.mark.parametrize("rounds", [25])
def test_two_multilocks_in_opposite_orders_never_deadlock(api, make_redlock, masters5, key, rounds):
    """Two holders contend in a loop for the same names listed in opposite orders: both finish
    their rounds, and never hold at once."""
    names = names_of(key)
    inside = threading.Lock()
    overlaps = []

    def contend(order):
        rl = make_redlock(urls(masters5), retry_delay=0.02)
        for _ in range(rounds):
            lock = rl.multilock(order, 10)
            assert lock.acquire(timeout=30), "a multilock waited 30 s"
            if not inside.acquire(blocking=False):
                overlaps.append(order)
            else:
                time.sleep(0.001)  # (the other holder would meet `inside` taken meanwhile)
                inside.release()
            lock.release()
        return rounds

    forward = InThread(lambda: contend(names))
    backward = InThread(lambda: contend(list(reversed(names))))
    assert forward.result(120) == rounds and backward.result(120) == rounds
    assert not overlaps, f"both held at once {len(overlaps)} times"
    assert all(not lock_keys(m) for m in masters5)


@pytest.mark.parametrize(
    ("names", "error", "words"),
    [
        ([], ValueError, "must not be empty"),
        (["a", "b", "a"], ValueError, "'a' is given twice"),
        ("ab", TypeError, "not a single str"),
        (["a", ""], ValueError, "name must not be empty"),
        (["a", 3], TypeError, "name must be str or bytes"),
        (["a", "hiredlock:fence:x"], ValueError, "reserved"),
    ],
)
def test_bad_names_are_refused_before_any_io(canary_redlock_fixture_api, names, error, words):
    with pytest.raises(error, match=words):
        canary_redlock_fixture_api.multilock(names, 30)


@pytest.fixture(name="canary_redlock_fixture_api")
def _canary_redlock(make_redlock, canary):
    rl = make_redlock([canary.url])
    yield rl
    make_redlock.close()
    assert not canary.touched(), "the library connected to a master while refusing bad input"


def test_fencing_is_refused_and_release_many_refuses_it(api, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    with pytest.raises(ValueError, match="fencing is not supported for a multilock"):
        rl.multilock(names_of(key), 30, fencing=True)
    lock = rl.multilock(names_of(key), 30)
    assert lock.acquire(blocking=False)
    with pytest.raises(ValueError, match="release_many takes"):
        rl.release_many([lock])
    lock.release()
    assert values(masters5, names_of(key)[0]) == [None] * 5


def test_check_proves_every_name_and_finds_one_gone(api, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    open_connections(rl)
    names = names_of(key)
    lock = rl.multilock(names, 30)
    assert lock.acquire(blocking=False)
    for server in masters5:
        server.admin().pexpire(names[1], 10_000)  # (the shortest-lived name bounds the validity)
    assert 5 < lock.check() <= 10
    # one name gone on a majority: the multilock is not held there any more, whatever the others
    for server in masters5[:3]:
        server.admin().delete(names[0])
    with pytest.raises(LockLost):
        lock.check()
    assert lock.lost.is_set()
    with pytest.raises(LockLost):
        lock.release()
    for name in names:
        assert_no_key(masters5, name)
