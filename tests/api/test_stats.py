"""lock.stats: what the last acquisition of a lock cost and did (the wait, the attempts, the votes
of the round that took it, kept after success while last_votes stays the last failed round's; the
renewals; the time held, set at release), for every kind, on both engines and both APIs."""

from __future__ import annotations

import pytest
from apis import (  # noqa: F401  (sync and async APIs)
    make_redlock_fixture,
    pytest_generate_tests,
    rwlock,
)
from support import set_foreign, urls, vote_for, wait_until

from hiredlock import LockLost, LockStats, Outcome

# (see test_events.CALM: no stall of a loaded machine makes a healthy master miss it)
CALM = {"master_timeout": 2}


def test_a_lock_never_acquired_has_empty_stats(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    assert rl.lock(key, 10).stats == LockStats(0.0, 0, (), 0, 0, None)


def test_stats_keep_the_winning_votes_and_the_time_held(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5), **CALM)
    lock = rl.lock(key, 10)
    assert lock.acquire()
    held = lock.stats
    assert held.attempts == 1 and held.waited > 0 and held.held_for is None
    assert sum(vote.outcome is Outcome.OK for vote in held.votes) >= 3
    assert len(held.votes) == 5
    assert lock.last_votes == ()  # (the last FAILED round's: none)
    lock.release()
    released = lock.stats
    assert released.votes == held.votes and released.waited == held.waited
    assert released.held_for is not None and released.held_for > 0
    assert (released.renewals, released.renewals_retried) == (0, 0)


def test_stats_count_the_attempts_and_the_wait_of_a_contended_acquire(
    engine, make_redlock, masters5, key
):
    set_foreign(masters5, key, px=400)  # held elsewhere for 0.4 s
    rl = make_redlock(urls(masters5), retry_delay=0.05)
    lock = rl.lock(key, 10, wake=False)
    assert lock.acquire(timeout=10)
    stats = lock.stats
    assert stats.attempts >= 2
    assert 0.2 <= stats.waited < 10
    assert sum(vote.outcome is Outcome.OK for vote in stats.votes) >= 3
    lock.release()


def test_stats_of_a_lost_lock_say_how_long_it_was_held(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5), **CALM)
    lock = rl.lock(key, 10)
    assert lock.acquire()
    set_foreign(masters5, key)
    with pytest.raises(LockLost):
        lock.extend()
    held_for = lock.stats.held_for
    assert held_for is not None and held_for > 0


def test_stats_count_renewals(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    lock = rl.lock(key, 0.3, auto_renew=True)
    assert lock.acquire()
    wait_until(lambda: lock.stats.renewals >= 2, 10, "two renewals")
    lock.release()
    assert lock.stats.renewals >= 2 and lock.stats.held_for is not None


def test_stats_keep_a_failed_masters_vote_of_the_winning_round(engine, make_redlock, redis_factory):
    servers = redis_factory(3)
    servers[0].kill()
    rl = make_redlock(urls(servers))
    lock = rl.lock("n", 10)
    assert lock.acquire()
    assert vote_for(lock.stats.votes, servers[0]).outcome is Outcome.CONN_ERROR
    assert vote_for(lock.stats.votes, servers[1]).outcome is Outcome.OK
    lock.release()


def test_every_kind_has_stats(engine, api, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5), **CALM)
    made = []
    rlock = rl.rlock(f"{key}:r", 10)
    with rlock:
        made.append(rlock)
    fair = rl.lock(f"{key}:f", 10, fair=True)
    with fair:
        made.append(fair)
    permit = rl.semaphore(f"{key}:s", 2, 10).acquire()
    permit.release()
    made.append(permit)
    rw = rwlock(rl, f"{key}:rw", 10)
    reader, writer = rw.read(), rw.write()
    with reader:
        pass
    with writer:
        pass
    made += [reader, writer]
    made += rl.acquire_many([f"{key}:a"], 10)
    rl.release_many(made[-1:])
    for lock in made:
        stats = lock.stats
        assert stats.attempts == 1 and stats.waited >= 0, lock
        assert stats.held_for is not None and stats.held_for >= 0, lock
        assert sum(vote.outcome is Outcome.OK for vote in stats.votes) >= 3, lock
