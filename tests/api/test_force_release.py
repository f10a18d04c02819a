"""force_release(name): an operator clears a name on every master, every kind's keys included,
whoever holds them, and is told what went; the fence counter stays (fences only grow)."""

from __future__ import annotations

import threading

import pytest
from apis import make_redlock_fixture, pytest_generate_tests, rwlock  # noqa: F401  (both APIs)
from support import assert_no_key, braced, kb, urls

from hiredlock import HiredlockError, LockLost, Outcome


def _keys_of(master, key):
    """Every key on `master` that belongs to the name `key` (hiredlock's own prefixes too)."""
    name = kb(key)
    tail = b":" + braced(key)  # (every internal key of a name without braces ends so)
    return sorted(k for k in master.admin().keys("*") if k == name or k.endswith(tail))


def test_force_release_removes_every_kind_and_keeps_the_fence(engine, make_redlock, masters5, key):
    holders = make_redlock(urls(masters5))
    fenced = holders.lock(key, 30, fencing=True)
    assert fenced.acquire(blocking=False)
    fence = fenced.fence
    fenced.release()
    fair = holders.lock(key, 30, fair=True, owner="stuck:1")
    assert fair.acquire(blocking=False)
    permits = [holders.semaphore(key, 3, 30).acquire(blocking=False) for _ in range(2)]
    assert all(permits)
    reader = rwlock(holders, key, 30).read()
    assert reader.acquire(blocking=False)
    name = kb(key)
    tail = braced(key)
    before = _keys_of(masters5[0], key)
    assert b"hiredlock:fence:" + tail in before and len(before) >= 5, before

    operator = make_redlock(urls(masters5))
    report = operator.force_release(key)

    assert [r.outcome for r in report] == [Outcome.OK] * 5
    assert [r.master for r in report] == [str(spec) for spec in operator.masters]
    for removed in report:
        assert removed.removed[name] == 1  # the fair lock's key
        assert removed.removed[b"hiredlock:permit:*:" + tail] == 2
        assert removed.removed[b"hiredlock:permit:size:" + tail] == 1  # (the semaphore's size)
        assert removed.removed[b"hiredlock:rw:r:" + tail] == 1
        assert b"hiredlock:fair:q:" + tail in removed.removed
        assert b"hiredlock:fence:" + tail not in removed.removed
    for master in masters5:
        assert _keys_of(master, key) == [b"hiredlock:fence:" + tail]
    # the holders learn it at their next extend or release
    for lock in (fair, reader, *permits):
        with pytest.raises(LockLost):
            lock.release()
    # fences still grow past the ones handed out
    again = holders.lock(key, 30, fencing=True)
    assert again.acquire(blocking=False)
    assert again.fence > fence
    again.release()


def test_force_release_of_a_free_name_removes_nothing(engine, make_redlock, masters5, key):
    report = make_redlock(urls(masters5)).force_release(key)
    assert [(r.outcome, r.removed) for r in report] == [(Outcome.OK, {})] * 5


def test_force_release_wakes_a_waiter(engine, make_redlock, masters5, key):
    holder = make_redlock(urls(masters5)).lock(key, 60)
    assert holder.acquire(blocking=False)
    waiter_client = make_redlock(urls(masters5), retry_delay=30)
    waiter = waiter_client.lock(key, 10)
    operator = make_redlock(urls(masters5))
    released = threading.Timer(0.5, operator.force_release, (key,))
    released.start()
    try:
        # woken by the release notice, not by its 30 s retry timer
        assert waiter.acquire(timeout=15)
    finally:
        released.join()
    waiter.release()
    assert_no_key(masters5, key)


def test_force_release_reports_a_dead_master(engine, make_redlock, masters5, key):
    holder = make_redlock(urls(masters5)).lock(key, 30)
    assert holder.acquire(blocking=False)
    masters5[0].kill()
    report = make_redlock(urls(masters5)).force_release(key)
    assert report[0].outcome in (Outcome.CONN_ERROR, Outcome.TIMEOUT) and report[0].removed == {}
    assert [r.removed for r in report[1:]] == [{kb(key): 1}] * 4


def test_force_release_is_refused_while_held_here(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    lock = rl.lock(key, 30)
    assert lock.acquire(blocking=False)
    with pytest.raises(HiredlockError, match="release it instead"):
        rl.force_release(key)
    lock.release()
    with pytest.raises(ValueError, match="name must not be empty"):
        rl.force_release("")
