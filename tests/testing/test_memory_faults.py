"""The faults a test makes on memory masters, each shown on a lock, on both APIs: advance (keys
expire, LockLost), stop/resume (no answer, then what was sent runs), kill/restart (keys lost,
refused), delay (a late master gives no vote within master_timeout); and inspect() and fencing
on memory masters."""

from __future__ import annotations

import time

import pytest
from apis import make_redlock_fixture, pytest_generate_tests  # noqa: F401  (sync and async APIs)

from hiredlock import LockLost, Outcome, QuorumUnreachable
from hiredlock.testing import MemoryMasters, memory_masters


@pytest.fixture
def engine() -> str:
    return "memory"


@pytest.fixture
def masters() -> MemoryMasters:
    return memory_masters(5)


def test_advance_past_the_ttl_loses_the_lock(make_redlock, masters, key):
    lock = make_redlock(masters).lock(key, 10)
    assert lock.acquire(blocking=False)
    masters.advance(11)
    assert all(masters.keys(i) == [] for i in range(5))
    with pytest.raises(LockLost):
        lock.extend()
    assert not lock.held


def test_advance_within_the_ttl_keeps_the_lock(make_redlock, masters, key):
    lock = make_redlock(masters).lock(key, 10)
    assert lock.acquire(blocking=False)
    masters.advance(9)
    lock.extend()  # (re-armed for 10 s from the masters' new time)
    masters.advance(9)
    lock.release()
    assert all(masters.keys(i) == [] for i in range(5))


def test_a_stopped_majority_makes_the_quorum_unreachable(make_redlock, masters, key):
    rl = make_redlock(masters, master_timeout=0.05)
    for i in range(3):
        masters.stop(i)
    with pytest.raises(QuorumUnreachable) as caught:
        rl.lock(key, 10).acquire(blocking=False)
    outcomes = [vote.outcome for vote in caught.value.votes]
    assert outcomes[:3] == [Outcome.TIMEOUT] * 3, caught.value.votes
    for i in range(3):
        masters.resume(i)
    # the stopped masters ran the attempt's SET and its unlock when they resumed: nothing is left
    assert all(masters.keys(i) == [] for i in range(5))
    lock = rl.lock(key, 10)
    assert lock.acquire(blocking=False)
    lock.release()


def test_a_stopped_minority_still_answers_when_resumed(make_redlock, masters, key):
    rl = make_redlock(masters, master_timeout=0.05)
    masters.stop(4)
    lock = rl.lock(key, 10)
    assert lock.acquire(blocking=False)
    assert masters.execute(4, "GET", key).text.endswith("is stopped")
    lock.release()
    masters.resume(4)  # its SET and then the release run, in the order they were sent
    assert masters.keys(4) == []


def test_kill_loses_the_keys_and_restart_brings_the_master_back_empty(make_redlock, masters, key):
    rl = make_redlock(masters)
    lock = rl.lock(key, 10)
    assert lock.acquire(blocking=False)
    masters.kill(0)
    masters.kill(1)
    lock.extend()  # three masters still hold it
    masters.kill(2)
    with pytest.raises(LockLost) as caught:
        lock.extend()
    assert [vote.outcome for vote in caught.value.votes][:3] == [Outcome.CONN_ERROR] * 3
    for i in range(3):
        masters.restart(i)
        assert masters.keys(i) == []
    assert masters.keys(3) == [key.encode()]
    # three empty masters are a majority: a restart without persistence frees a held name
    other = rl.lock(key, 10)
    assert other.acquire(blocking=False)
    other.release()


def test_a_delayed_master_gives_no_vote_within_master_timeout(make_redlock, masters, key):
    rl = make_redlock(masters, master_timeout=0.05)
    for i in range(3):
        masters.delay(i, 5.0)
    start = time.monotonic()
    with pytest.raises(QuorumUnreachable) as caught:
        rl.lock(key, 10).acquire(blocking=False)
    assert time.monotonic() - start < 4.0  # the round ended at its timeout, not at the replies
    assert [vote.outcome for vote in caught.value.votes][:3] == [Outcome.TIMEOUT] * 3
    for i in range(3):
        masters.delay(i, 0)
    lock = rl.lock(key, 10)
    assert lock.acquire(blocking=False)
    lock.release()


def test_a_delay_within_master_timeout_is_waited_for(make_redlock, masters, key):
    rl = make_redlock(masters, master_timeout=2.0)
    for i in range(3):
        masters.delay(i, 0.05)
    lock = rl.lock(key, 10)
    start = time.monotonic()
    assert lock.acquire(blocking=False)
    assert time.monotonic() - start >= 0.05  # the quorum needed a late master's vote
    lock.release()


def test_inspect_on_memory_masters(make_redlock, masters, key):
    rl = make_redlock(masters)
    lock = rl.lock(key, 10)
    assert lock.acquire(blocking=False)
    masters.kill(4)
    states = rl.inspect(key)
    assert [state.master for state in states] == [str(m) for m in masters]
    assert all(state.exists and state.ours for state in states[:4]), states
    assert all(0 < state.pttl_ms <= 10_000 for state in states[:4]), states
    assert states[4].outcome == Outcome.CONN_ERROR
    lock.release()
    assert not any(state.exists for state in rl.inspect(key)[:4])


def test_fences_increase_across_holders_and_restarts(make_redlock, masters, key):
    rl = make_redlock(masters)
    fences = []
    for restart in (None, 0, 1, None):
        if restart is not None:
            masters.kill(restart)
            masters.restart(restart)
        lock = rl.lock(key, 10, fencing=True)
        assert lock.acquire(blocking=False)
        fences.append(lock.fence)
        lock.release()
    assert fences == sorted(set(fences)), fences
