"""A semaphore's size lives on the masters: clients that ask for different sizes of one name do not
add their permits up. The size is stored with the semaphore (`hiredlock:permit:size:<name>`) by
the acquire that takes a permit, lives as long as the permits taken under it (renewals keep it)
and goes with the last one released; a client asking for another size meanwhile gets
SemaphoreSizeMismatch, and inspect() shows the size and the permits held on each master. Both
engines, both APIs."""

from __future__ import annotations

import time

import pytest
from apis import make_redlock_fixture, pytest_generate_tests  # noqa: F401
from support import braced, open_connections, urls

import hiredlock
from hiredlock import HiredlockError, SemaphoreSizeMismatch


def size_key(name: str) -> bytes:
    return b"hiredlock:permit:size:" + braced(name)


def test_two_sizes_never_give_more_holders_than_the_smaller(make_redlock, masters5, key):
    one = make_redlock(urls(masters5)).semaphore(key, 1, 30)
    three = make_redlock(urls(masters5)).semaphore(key, 3, 30)
    first = one.acquire(blocking=False)
    assert first is not None
    with pytest.raises(SemaphoreSizeMismatch) as caught:
        three.acquire(blocking=False)
    error = caught.value
    assert isinstance(error, HiredlockError) and isinstance(error, ValueError)
    assert (error.name, error.permits, error.stored) == (key, 3, 1)
    assert repr(key) in str(error) and "3" in str(error) and "1" in str(error)
    # and the other way round: a smaller size while the larger one holds permits
    first.release()


def test_a_smaller_size_is_refused_while_a_larger_one_holds(make_redlock, masters5, key):
    three = make_redlock(urls(masters5)).semaphore(key, 3, 30)
    one = make_redlock(urls(masters5)).semaphore(key, 1, 30)
    held = [three.acquire(blocking=False) for _ in range(2)]
    assert all(held)
    with pytest.raises(SemaphoreSizeMismatch) as caught:
        one.acquire(blocking=False)
    assert (caught.value.permits, caught.value.stored) == (1, 3)
    with pytest.raises(SemaphoreSizeMismatch):
        one.acquire(timeout=0.2)  # a blocking acquire is refused as well, at once
    for permit in held:
        permit.release()


def test_the_size_record_lives_as_long_as_its_permits(make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    open_connections(rl)
    sem = rl.semaphore(key, 2, 30)
    permit = sem.acquire(blocking=False)
    assert permit is not None
    # (where the permit was taken: a quorum at least)
    assert sum(m.admin().get(size_key(key)) == b"2" for m in masters5) >= 3
    assert sum(25_000 < m.admin().pttl(size_key(key)) <= 30_000 for m in masters5) >= 3
    permit.extend(60)  # the record is kept at least as long as the permit
    assert sum(55_000 < m.admin().pttl(size_key(key)) <= 60_000 for m in masters5) >= 3
    permit.release()


def test_a_new_size_works_once_the_old_holders_released(make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    open_connections(rl)
    old = rl.semaphore(key, 3, 30)
    new = make_redlock(urls(masters5)).semaphore(key, 1, 30)
    permits = [old.acquire(blocking=False) for _ in range(2)]
    assert all(permits)
    permits[0].release()
    with pytest.raises(SemaphoreSizeMismatch):
        new.acquire(blocking=False)  # one old holder is left
    permits[1].release()  # the last one: the size record goes with it
    taken = new.acquire(blocking=False)
    assert taken is not None
    assert sum(m.admin().get(size_key(key)) == b"1" for m in masters5) >= 3
    taken.release()


def test_a_new_size_works_once_a_dead_holders_permit_expired(make_redlock, masters5, key):
    old = make_redlock(urls(masters5)).semaphore(key, 3, 0.5)
    new = make_redlock(urls(masters5)).semaphore(key, 1, 30)
    assert old.acquire(blocking=False) is not None  # never released: it expires with its ttl
    with pytest.raises(SemaphoreSizeMismatch):
        new.acquire(blocking=False)
    deadline = time.monotonic() + 10
    while True:  # (no event to wait on: the masters' clocks expire the permit)
        try:
            taken = new.acquire(blocking=False)
            break
        except SemaphoreSizeMismatch:
            assert time.monotonic() < deadline, "the old size outlived its permit"
            time.sleep(0.05)
    assert taken is not None
    taken.release()


def test_renewals_keep_the_size_while_held(make_redlock, masters5, key):
    holder = make_redlock(urls(masters5)).semaphore(key, 2, 1.0, auto_renew=True)
    other = make_redlock(urls(masters5)).semaphore(key, 1, 30)
    permit = holder.acquire(blocking=False)
    assert permit is not None
    assert permit.lost.wait(2.5) is False  # (over two ttls: held only if renewed)
    assert permit.held
    with pytest.raises(SemaphoreSizeMismatch):
        other.acquire(blocking=False)
    permit.release()


def test_inspect_shows_the_size_and_the_permits_held(make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    open_connections(rl)
    sem = rl.semaphore(key, 3, 30)
    before = rl.inspect(key)
    assert all(state.permits is None and state.permits_held is None for state in before)
    permits = [sem.acquire(blocking=False) for _ in range(2)]
    states = rl.inspect(key)
    assert [(state.permits, state.permits_held) for state in states] == [(3, 2)] * 5
    for permit in permits:
        permit.release()
    # the last release takes the size with it
    assert [(state.permits, state.permits_held) for state in rl.inspect(key)] == [(None, None)] * 5


def test_the_error_is_exported():
    assert hiredlock.SemaphoreSizeMismatch is SemaphoreSizeMismatch
