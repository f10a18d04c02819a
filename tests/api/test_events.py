"""Events: what a client tells its observers (on_event, then the default observers), for every kind
of lock, on both engines and both APIs: acquired, acquire_failed and why, released, extended,
renewed, renewal_retried, lost, and degraded (a round that counted while a master failed), never
in a healthy run; an observer that raises never breaks a lock; each event is told in the thread
(or the event loop) that did the thing."""

from __future__ import annotations

import logging
import threading

import pytest
from apis import (  # noqa: F401  (sync and async APIs)
    make_redlock_fixture,
    pytest_generate_tests,
    rwlock,
)
from support import set_foreign, urls, vote_for, wait_until

from hiredlock import (
    Event,
    LockLost,
    NotHeld,
    Outcome,
    QuorumUnreachable,
)
from hiredlock._core.events import add_default_observer, remove_default_observer


class Recorder:
    """An observer that keeps every event, and the thread each came in."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.threads: list[int] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)
        self.threads.append(threading.get_ident())

    def kinds(self) -> list[str]:
        return [event.kind for event in self.events]

    def of(self, kind: str) -> list[Event]:
        return [event for event in self.events if event.kind == kind]

    def clear(self) -> None:
        self.events.clear()
        self.threads.clear()


# A per-master timeout no stall of a loaded machine reaches, for the tests that count every event
# of healthy rounds: a master that misses the default one (50 ms at most) has failed, and its
# round would rightly be degraded.
CALM = {"master_timeout": 2}


def _all_ok(votes, skipped=False) -> bool:
    """Every master said OK (or, with `skipped`, was not waited for once a quorum had: an acquire
    stops at the quorum); a quorum of OK in any case."""
    fine = (Outcome.OK, Outcome.SKIPPED) if skipped else (Outcome.OK,)
    oks = sum(vote.outcome is Outcome.OK for vote in votes)
    return len(votes) == 5 and oks >= 3 and all(vote.outcome in fine for vote in votes)


def test_a_lock_cycle_tells_acquired_extended_released(engine, make_redlock, masters5, key):
    seen = Recorder()
    rl = make_redlock(urls(masters5), on_event=seen, **CALM)
    lock = rl.lock(key, 10)
    assert lock.acquire()
    lock.extend()
    lock.release()
    assert seen.kinds() == ["acquired", "extended", "released"]
    acquired, extended, released = seen.events
    assert (acquired.name, acquired.lock_kind, acquired.attempts) == (key, "Lock", 1)
    assert acquired.duration > 0 and _all_ok(acquired.votes, skipped=True)
    assert extended.duration > 0 and _all_ok(extended.votes)
    assert released.held_for >= extended.duration and _all_ok(released.votes)
    assert released.reason is None and released.operation is None


def test_no_degraded_event_in_a_healthy_run(engine, make_redlock, masters5, key):
    seen = Recorder()
    rl = make_redlock(urls(masters5), on_event=seen, **CALM)
    for i in range(30):
        with rl.lock(f"{key}:{i % 3}", 10):
            pass
    assert seen.of("degraded") == [], seen.of("degraded")
    assert seen.kinds() == ["acquired", "released"] * 30


def test_a_lock_held_elsewhere_tells_acquire_failed_not_acquired(
    engine, make_redlock, masters5, key
):
    set_foreign(masters5, key)
    seen = Recorder()
    rl = make_redlock(urls(masters5), on_event=seen, retry_delay=0.01)
    assert not rl.lock(key, 10).acquire(blocking=False)
    assert not rl.lock(key, 10).acquire(timeout=0.2)
    once, waited = seen.events
    assert (once.kind, once.reason, once.attempts) == ("acquire_failed", "not_acquired", 1)
    assert len(once.votes) == 5 and {vote.outcome for vote in once.votes} <= {
        Outcome.TAKEN,
        Outcome.SKIPPED,
    }
    assert (waited.kind, waited.reason) == ("acquire_failed", "not_acquired")
    assert waited.attempts >= 2 and waited.duration >= 0.2


def test_masters_down_tell_acquire_failed_quorum_unreachable(engine, make_redlock, redis_factory):
    servers = redis_factory(3)
    for server in servers[:2]:
        server.kill()
    seen = Recorder()
    rl = make_redlock(urls(servers), on_event=seen, retry_count=1)
    with pytest.raises(QuorumUnreachable):
        rl.lock("n", 10).acquire()
    (event,) = seen.events
    assert (event.kind, event.reason, event.attempts) == ("acquire_failed", "quorum_unreachable", 1)
    assert vote_for(event.votes, servers[0]).outcome is Outcome.CONN_ERROR


def test_a_killed_minority_tells_degraded_with_the_master_and_what_it_said(
    engine, make_redlock, redis_factory
):
    servers = redis_factory(3)
    servers[2].kill()
    seen = Recorder()
    rl = make_redlock(urls(servers), on_event=seen, **CALM)
    lock = rl.lock("n", 10)
    assert lock.acquire()
    lock.extend()
    lock.release()
    assert seen.kinds() == [
        "degraded",
        "acquired",
        "degraded",
        "extended",
        "degraded",
        "released",
    ]
    for event, operation in zip(seen.of("degraded"), ["acquire", "extend", "release"]):
        assert event.operation == operation and event.name == "n"
        assert vote_for(event.votes, servers[2]).outcome is Outcome.CONN_ERROR
        assert vote_for(event.votes, servers[0]).outcome is Outcome.OK
    assert lock.stats.votes == seen.of("acquired")[0].votes


def test_every_kind_tells_its_acquire_and_release(engine, api, make_redlock, masters5, key):
    seen = Recorder()
    rl = make_redlock(urls(masters5), on_event=seen, **CALM)
    with rl.rlock(f"{key}:r", 10):
        pass
    with rl.lock(f"{key}:f", 10, fair=True):
        pass
    semaphore = rl.semaphore(f"{key}:s", 2, 10)
    permit = semaphore.acquire()
    permit.release()
    rw = rwlock(rl, f"{key}:rw", 10)
    with rw.read():
        pass
    with rw.write():
        pass
    with rl.multilock([f"{key}:m1", f"{key}:m2"], 10):
        pass
    rl.release_many(rl.acquire_many([f"{key}:a", f"{key}:b"], 10))
    expected = [
        "RLock", "FairLock", "Semaphore", "ReadLock", "WriteLock", "MultiLock", "Lock", "Lock"
    ]  # fmt: skip
    acquired = seen.of("acquired")
    assert [event.lock_kind for event in acquired] == expected
    assert [event.lock_kind for event in seen.of("released")] == expected
    assert acquired[-3].name == (f"{key}:m1", f"{key}:m2")  # (a multilock's: all its names)
    assert [event.name for event in acquired][-2:] == [f"{key}:a", f"{key}:b"]
    assert all(_all_ok(event.votes, skipped=True) for event in acquired)
    assert seen.of("degraded") == []


def test_a_semaphore_with_no_free_permit_tells_acquire_failed(engine, make_redlock, masters5, key):
    seen = Recorder()
    rl = make_redlock(urls(masters5), on_event=seen, **CALM)
    semaphore = rl.semaphore(key, 1, 10)
    held = semaphore.acquire()
    assert held is not None
    assert rl.semaphore(key, 1, 10).acquire(blocking=False) is None
    failed = seen.of("acquire_failed")
    assert [(e.lock_kind, e.reason, e.attempts) for e in failed] == [
        ("Semaphore", "not_acquired", 1)
    ]
    held.release()


def test_a_batch_tells_one_event_per_lock(engine, make_redlock, masters5, key):
    set_foreign(masters5, f"{key}:taken")
    seen = Recorder()
    rl = make_redlock(urls(masters5), on_event=seen, **CALM)
    got = rl.acquire_many([f"{key}:a", f"{key}:taken"], 10)
    assert got[1] is None
    assert [(e.kind, e.name) for e in seen.events] == [
        ("acquired", f"{key}:a"),
        ("acquire_failed", f"{key}:taken"),
    ]
    assert seen.events[1].reason == "not_acquired"
    rl.release_many([got[0]])
    assert seen.events[-1][:2] == ("released", f"{key}:a")


def test_an_extend_that_finds_the_lock_gone_tells_lost(engine, make_redlock, masters5, key):
    seen = Recorder()
    rl = make_redlock(urls(masters5), on_event=seen, **CALM)
    lock = rl.lock(key, 10)
    assert lock.acquire()
    set_foreign(masters5, key)
    with pytest.raises(LockLost):
        lock.extend()
    (lost,) = seen.of("lost")
    assert lost.reason and lost.held_for > 0
    assert all(vote.outcome is Outcome.TAKEN for vote in lost.votes)
    with pytest.raises(LockLost):
        lock.release()
    assert seen.kinds() == ["acquired", "lost"]  # (its loss is told once)


def test_a_release_that_finds_the_lock_gone_tells_lost(engine, make_redlock, masters5, key):
    seen = Recorder()
    rl = make_redlock(urls(masters5), on_event=seen, **CALM)
    lock = rl.lock(key, 10)
    assert lock.acquire()
    set_foreign(masters5, key)
    with pytest.raises(LockLost):
        lock.release()
    assert seen.kinds() == ["acquired", "lost"]
    assert seen.events[1].held_for > 0


def test_auto_renewal_tells_renewed(engine, make_redlock, masters5, key):
    seen = Recorder()
    rl = make_redlock(urls(masters5), on_event=seen)
    lock = rl.lock(key, 0.3, auto_renew=True)
    assert lock.acquire()
    wait_until(lambda: len(seen.of("renewed")) >= 2, 10, "two renewals")
    lock.release()
    renewed = seen.of("renewed")
    assert all(_all_ok(event.votes) and event.lock_kind == "Lock" for event in renewed)
    assert lock.stats.renewals >= 2


def test_a_renewal_that_fails_on_a_majority_is_retried_and_told(
    engine, make_redlock, redis_factory
):
    servers = redis_factory(3)
    seen = Recorder()
    rl = make_redlock(urls(servers), on_event=seen)
    lock = rl.lock("n", 3, auto_renew=True)
    assert lock.acquire()
    for server in servers[1:]:
        server.stop()  # SIGSTOP: the renewal times out on a majority, and is retried
    try:
        wait_until(lambda: seen.of("renewal_retried"), 10, "a retried renewal")
    finally:
        for server in servers[1:]:
            server.cont()
    wait_until(lambda: seen.of("renewed"), 10, "a renewal after the masters came back")
    retried = seen.of("renewal_retried")[0]
    assert retried.reason and retried.name == "n"
    assert vote_for(retried.votes, servers[1]).outcome is Outcome.TIMEOUT
    assert lock.stats.renewals_retried >= 1
    lock.release()


def test_an_observer_that_raises_never_breaks_a_lock_and_is_logged_once(
    engine, make_redlock, masters5, key, caplog
):
    calls = []

    def broken(event: Event) -> None:
        calls.append(event.kind)
        raise RuntimeError("observer bug")

    after = Recorder()
    add_default_observer(after)
    try:
        rl = make_redlock(urls(masters5), on_event=broken)
    finally:
        remove_default_observer(after)
    with caplog.at_level(logging.ERROR, logger="hiredlock.events"):
        for _ in range(3):
            lock = rl.lock(key, 10)
            assert lock.acquire()
            lock.extend()
            lock.release()
    assert calls == ["acquired", "extended", "released"] * 3
    assert after.kinds() == calls  # the next observer is still told
    logged = [r for r in caplog.records if r.name == "hiredlock.events"]
    assert len(logged) == 1 and "observer bug" in caplog.text


def test_events_are_told_where_the_lock_acted(engine, api, make_redlock, masters5, key):
    seen = Recorder()
    rl = make_redlock(urls(masters5), on_event=seen, **CALM)
    with rl.lock(key, 10):
        pass
    if api == "sync":
        assert seen.threads == [threading.get_ident()] * 2
    else:  # the event loop's thread (the facade runs the loop in a thread of its own)
        assert len(set(seen.threads)) == 1 and seen.threads[0] != threading.get_ident()


def test_release_of_a_lock_never_acquired_tells_nothing(engine, make_redlock, masters5, key):
    seen = Recorder()
    rl = make_redlock(urls(masters5), on_event=seen, **CALM)
    with pytest.raises(NotHeld):
        rl.lock(key, 10).release()
    assert seen.events == []
