"""Unreachable masters.  Killed masters (connection refused), SIGSTOPped masters (connection
accepted by the kernel, no answer), and black-hole addresses (connect never completes)."""

from __future__ import annotations

import time

import pytest
from servers import BlackHole
from support import (
    EXTRA_SLACK,
    assert_foreign_intact,
    assert_no_key,
    assert_values,
    attempt,
    set_foreign,
    urls,
    vote_for,
    wait_until,
)

from hiredlock import LockNotAcquired, Outcome, QuorumUnreachable
from hiredlock._core import scripts as _scripts

MT = 0.05  # master_timeout used by these tests
FAILED = {Outcome.TIMEOUT, Outcome.CONN_ERROR, Outcome.ERROR}


def unreachable_bound(master_timeout, retry_count, retry_delay):
    return master_timeout * retry_count + retry_delay * 1.5 * (retry_count - 1) + 0.1 + EXTRA_SLACK


# -- killed masters ---------------------------------------------------------------------------


def test_two_of_five_killed(engine, make_redlock, masters5, key):
    dead, live = masters5[:2], masters5[2:]
    rl = make_redlock(urls(masters5), master_timeout=MT)
    warm = rl.lock(key + ":warm", 5)
    assert warm.acquire(blocking=False)
    warm.release()
    for m in dead:
        m.kill()
    for fresh in (False, True):
        r = make_redlock(urls(masters5), master_timeout=MT) if fresh else rl
        lock = r.lock(key, 5)
        t0 = time.monotonic()
        assert lock.acquire(blocking=False) is True
        assert time.monotonic() - t0 <= MT + 0.05 + EXTRA_SLACK
        assert_values(live, key, lock.token)
        lock.release()  # 3 of 5 held it: no LockLost
        assert_no_key(live, key)


@pytest.mark.parametrize("how", ["kill", "stop"])
@pytest.mark.parametrize("mt", [0.05, 0.2])
def test_three_of_five_down_raises_quorum_unreachable(engine, make_redlock, masters5, key, how, mt):
    down, live = masters5[:3], masters5[3:]
    retry_count, retry_delay = 3, 0.05
    rl = make_redlock(
        urls(masters5), master_timeout=mt, retry_count=retry_count, retry_delay=retry_delay
    )
    warm = rl.lock(key + ":warm", 5)
    assert warm.acquire(blocking=False)
    warm.release()
    for m in down:
        m.kill() if how == "kill" else m.stop()
    lock = rl.lock(key, 5)
    t0 = time.monotonic()
    with pytest.raises(QuorumUnreachable) as ei:
        lock.acquire()
    elapsed = time.monotonic() - t0
    assert elapsed <= unreachable_bound(mt, retry_count, retry_delay), elapsed
    assert isinstance(ei.value, LockNotAcquired)
    assert not lock.held
    votes = ei.value.votes
    assert len(votes) == 5
    for m in down:
        assert vote_for(votes, m).outcome in FAILED, votes
    for m in live:
        assert vote_for(votes, m).outcome in {Outcome.OK, Outcome.SKIPPED}, votes
    assert_no_key(live, key, "on live masters after QuorumUnreachable")
    # the context manager raises the same way
    t0 = time.monotonic()
    with pytest.raises(QuorumUnreachable), rl.lock(key, 5):
        pytest.fail("entered a lock without a quorum")
    assert time.monotonic() - t0 <= unreachable_bound(mt, retry_count, retry_delay)
    assert_no_key(live, key)


@pytest.mark.parametrize("ttl,expected_mt", [(0.2, 0.01), (10, 0.05)])
def test_default_master_timeout(engine, make_redlock, masters5, key, ttl, expected_mt):
    """master_timeout=None: 5% of ttl clamped to [5, 50] ms; 3 of 5 stopped, one attempt. The
    connections are opened first: a connection that opens in a round has a longer bound of its own
    (_scripts.CONNECT_TIMEOUT_MIN_MS)."""
    rl = make_redlock(urls(masters5), retry_count=1)
    lock = rl.lock(key, ttl)
    assert lock.acquire(blocking=False)
    lock.release()
    for m in masters5[:3]:
        m.stop()
    t0 = time.monotonic()
    with pytest.raises(QuorumUnreachable):
        lock.acquire(blocking=False)
    assert time.monotonic() - t0 <= expected_mt + 0.05 + EXTRA_SLACK
    assert_no_key(masters5[3:], key)


def test_killed_masters_come_back(engine, make_redlock, masters5, key):
    """Masters killed and restarted on the same port are used again (reconnect with backoff)."""
    rl = make_redlock(urls(masters5), master_timeout=MT)
    warm = rl.lock(key + ":warm", 5)
    assert warm.acquire(blocking=False)
    warm.release()
    for m in masters5[:2]:
        m.kill()
    lock = rl.lock(key, 5)
    assert lock.acquire(blocking=False)
    lock.release()
    for m in masters5[:2]:
        m.restart()
    # Now require the restarted masters: take the key on two of the never-killed ones.
    set_foreign(masters5[2:4], key)
    state = {"n": 0}

    def ok():
        state["n"] += 1
        lk = rl.lock(key, 5)
        r = attempt(lk, blocking=False)
        if r is True:
            lk.release()
            return True
        return False

    wait_until(ok, 10, "acquire using the restarted masters")
    assert_foreign_intact(masters5[2:4], key)
    assert_no_key([masters5[0], masters5[1], masters5[4]], key)


# -- stopped (frozen) masters -------------------------------------------------------------------


def _run_cycles(rl, masters, key, n):
    for i in range(n):
        lk = rl.lock(f"{key}:cycle{i}", 5)
        r = attempt(lk, blocking=False)
        assert r is True, f"cycle {i}: {r!r}"
        lk.release()
        assert_no_key(masters, f"{key}:cycle{i}", f"after release in cycle {i}")


@pytest.mark.parametrize("k", [1, 2])
def test_stopped_masters(engine, make_redlock, masters5, key, k):
    stopped, healthy = masters5[5 - k :], masters5[: 5 - k]
    rl = make_redlock(urls(masters5), master_timeout=MT)
    warm = rl.lock(key + ":warm", 5)
    assert warm.acquire(blocking=False)
    warm.release()
    for m in stopped:
        m.stop()
    try:
        # warm connections (rl) and cold ones (a new Redlock) to the frozen masters
        for r in (rl, make_redlock(urls(masters5), master_timeout=MT)):
            lock = r.lock(key, 5)
            t0 = time.monotonic()
            assert lock.acquire(blocking=False) is True
            assert time.monotonic() - t0 <= MT + 0.05 + EXTRA_SLACK
            assert_values(healthy, key, lock.token)
            t0 = time.monotonic()
            lock.release()  # k frozen masters time out; the healthy quorum had our token
            assert time.monotonic() - t0 <= MT + 0.05 + EXTRA_SLACK
            assert_no_key(healthy, key)
    finally:
        for m in stopped:
            m.cont()
    # Buffered commands of the frozen masters have run now (cont() waits for that); the old key
    # may exist there with our old token until it expires, so later cycles use other names.
    _run_cycles(rl, masters5, key, 50)

    # Late replies must never be read as answers to later commands.  First wait until the
    # resumed masters are used again (the engine may back off before reconnecting), with a
    # layout where they are required: foreign keys on healthy masters leave exactly a quorum free.
    need_resumed = healthy[: len(healthy) - (3 - k)]  # taken; free = rest of healthy + stopped

    def positive(name):
        set_foreign(need_resumed, name)
        lk = rl.lock(name, 5)
        r = attempt(lk, blocking=False)
        if r is True:
            assert_values(stopped, name, lk.token)
            lk.release()
            assert_no_key([m for m in masters5 if m not in need_resumed], name)
        assert_foreign_intact(need_resumed, name)
        return r is True

    counter = iter(range(10**6))
    wait_until(
        lambda: positive(f"{key}:wait{next(counter)}"), 10, "resumed masters answering again"
    )

    # Now alternate: a layout whose truthful answer is "taken" (the resumed masters hold a foreign
    # key; only quorum-1 free) and one that needs the resumed masters' OK.
    neg_taken = list(stopped) + healthy[: len(healthy) - 2]
    for i in range(20):
        name = f"{key}:neg{i}"
        set_foreign(neg_taken, name)
        lk = rl.lock(name, 5)
        r = attempt(lk, blocking=False)
        assert r is not True, (
            f"acquired with only {5 - len(neg_taken)} free masters (iteration {i})"
        )
        assert_foreign_intact(neg_taken, name)
        assert_no_key([m for m in masters5 if m not in neg_taken], name)
        assert positive(f"{key}:pos{i}"), f"resumed masters refused a free key (iteration {i})"


def test_stopped_majority_then_resumed(engine, make_redlock, masters5, key):
    """3 of 5 frozen mid-conversation, then resumed: every later round works."""
    rl = make_redlock(urls(masters5), master_timeout=MT, retry_count=1)
    warm = rl.lock(key + ":warm", 5)
    assert warm.acquire(blocking=False)
    warm.release()
    for m in masters5[:3]:
        m.stop()
    for i in range(3):
        with pytest.raises(QuorumUnreachable):
            rl.lock(f"{key}:down{i}", 5).acquire(blocking=False)
    for m in masters5[:3]:
        m.cont()
    state = iter(range(10**6))

    def ok():
        lk = rl.lock(f"{key}:up{next(state)}", 5)
        if attempt(lk, blocking=False) is True:
            lk.release()
            return True
        return False

    wait_until(ok, 10, "quorum back after SIGCONT")
    _run_cycles(rl, masters5, key, 20)


# -- black holes: connect() never completes ------------------------------------------------------


def test_black_hole_minority_costs_only_timeout(engine, make_redlock, masters5, key):
    """The acquire, decided by the live masters, costs at most master_timeout; the release waits
    for every master, and for one whose connection opens in its round that is up to the connect
    allowance (CONNECT_TIMEOUT_MIN_MS from the round's start)."""
    release_bound = max(MT, _scripts.CONNECT_TIMEOUT_MIN_MS / 1000) + 0.05 + EXTRA_SLACK
    holes = [BlackHole(), BlackHole()]
    try:
        masters = urls(masters5[:3]) + [h.url for h in holes]
        rl = make_redlock(masters, master_timeout=MT)
        for i in range(3):
            lock = rl.lock(f"{key}:{i}", 5)
            t0 = time.monotonic()
            assert lock.acquire(blocking=False) is True
            assert time.monotonic() - t0 <= MT + 0.05 + EXTRA_SLACK
            t0 = time.monotonic()
            lock.release()
            assert time.monotonic() - t0 <= release_bound
            assert_no_key(masters5[:3], f"{key}:{i}")
    finally:
        for h in holes:
            h.close()


@pytest.mark.parametrize("mt", [0.05, 0.2])
def test_black_hole_majority_raises_within_timeouts(engine, make_redlock, masters5, key, mt):
    """3 of 5 masters never complete connect(): QuorumUnreachable within
    master_timeout x retry_count + delays + 0.1 s, i.e. each attempt costs at most one
    master_timeout (mt=0.2 makes an extra wait per attempt visible beyond the 0.1 s slack)."""
    holes = [BlackHole() for _ in range(3)]
    try:
        masters = urls(masters5[:2]) + [h.url for h in holes]
        retry_count, retry_delay = 3, 0.01
        rl = make_redlock(
            masters, master_timeout=mt, retry_count=retry_count, retry_delay=retry_delay
        )
        lock = rl.lock(key, 5)
        t0 = time.monotonic()
        with pytest.raises(QuorumUnreachable) as ei:
            lock.acquire()
        elapsed = time.monotonic() - t0
        assert elapsed <= unreachable_bound(mt, retry_count, retry_delay), elapsed
        outcomes = [v.outcome for v in ei.value.votes]
        assert sum(o in FAILED for o in outcomes) >= 3, ei.value.votes
        assert_no_key(masters5[:2], key)
    finally:
        for h in holes:
            h.close()


# -- a batch larger than a stopped master's socket buffers ---------------------------------------


def test_batch_larger_than_a_stopped_masters_buffers(engine, make_redlock, redis_factory, key):
    """Master 0 is SIGSTOPped and the batch (~6 MB of 30 KB names) does not fit in its socket
    buffers (about 4 MB here): what the socket does not take is kept and written once it can
    be, and the live masters' round is not held up by it. The two live masters make the
    quorum; once master 0 is resumed, the release removes every key there too."""
    servers = redis_factory(3)
    rl = make_redlock(urls(servers), master_timeout=2.0)
    names = [f"{key}:{i}:" + "x" * 30_000 for i in range(200)]
    servers[0].stop()
    try:
        locks = rl.acquire_many(names, 30)
        assert all(lock is not None for lock in locks)
        for name, lock in zip(names[::50], locks[::50]):
            assert_values(servers[1:], name, lock.token)
    finally:
        servers[0].cont()
    rl.release_many(locks)
    for s in servers:
        wait_until(lambda s=s: s.admin().dbsize() == 0, 10, f"every key gone from {s}")
