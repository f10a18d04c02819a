"""The batch API: Redlock.acquire_many(names, ttl) and Redlock.release_many(locks).

One round trip to each master for the whole batch; each name judged on its own quorum and
validity; None for the names not acquired (unlocked everywhere); QuorumUnreachable only when no
name could have been acquired; release_many releases every lock and raises LockLost naming the
ones no longer held by a quorum.  Bad input fails before any I/O, as Lock() does."""

from __future__ import annotations

import math
import time

import pytest
from apis import (  # noqa: F401  (sync and async APIs)
    canary_redlock_fixture,
    make_redlock_fixture,
    pytest_generate_tests,
)
from faults.proxy import FaultProxy
from support import (
    EXTRA_SLACK,
    TOKEN_RE,
    assert_foreign_intact,
    assert_no_key,
    assert_pttl_between,
    assert_values,
    set_foreign,
    urls,
    vote_for,
    wait_until,
)

from hiredlock import LockLost, LockNotAcquired, NotHeld, Outcome, QuorumUnreachable
from hiredlock._core.scripts import SCRIPT_BATCH_ITEMS

FAILED = {Outcome.TIMEOUT, Outcome.CONN_ERROR, Outcome.ERROR}
# Per-master timeout: these tests are about the batch, not about slow masters; a loaded machine
# must not turn a late reply into a failed vote (killed masters refuse at once all the same).
MT = 1.0


def batch_names(key, n):
    return [f"{key}:{i}" for i in range(n)]


def calls(server, *commands):
    """How many times `server` ran these commands (INFO commandstats)."""
    stats = server.admin().info("commandstats")
    return sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in commands)


def script_calls(server):
    return calls(server, "eval", "evalsha")


def assert_no_keys_at_all(servers, what):
    """No key of any name is left (poll: the last masters' replies may not have been waited for)."""
    wait_until(lambda: all(s.admin().dbsize() == 0 for s in servers), 1.0, f"no key left {what}")


def settle(servers, locks):
    """Wait until every master holds each lock's token: acquire_many returns once a quorum said OK,
    the other masters' SETs may still be on their way (tampering must come after them)."""
    for lk in locks:
        assert_values(servers, lk.key, lk.token)


def drift_s(ttl_s):
    return ttl_s * 0.01 + 0.002  # the default drift_factor and the 2 ms constant


# -- all free -------------------------------------------------------------------------------------


def test_all_free_every_name_is_held(engine, make_redlock, masters5, key):
    names = [*batch_names(key, 9), (key + ":bytes").encode()]
    rl = make_redlock(urls(masters5), master_timeout=MT)
    t0 = time.monotonic()
    locks = rl.acquire_many(names, 10)
    elapsed = time.monotonic() - t0

    assert isinstance(locks, list)
    assert len(locks) == len(names)
    assert None not in locks, locks
    assert [lk.name for lk in locks] == names  # one result per name, in order
    assert len({lk.token for lk in locks}) == len(names)
    for lk, name in zip(locks, names):
        assert lk.held
        assert TOKEN_RE.match(lk.token), lk.token
        assert lk.key == (name if isinstance(name, bytes) else name.encode())
        assert lk.ttl == pytest.approx(10)
        assert_values(masters5, lk.key, lk.token)
        assert_pttl_between(masters5, lk.key, 9000, 10000)
        # validity: counted from before the round, the drift kept back
        v = lk.validity
        assert 10 - drift_s(10) - elapsed - 0.5 - EXTRA_SLACK < v <= 10 - drift_s(10), v
    rl.release_many(locks)
    assert all(not lk.held and lk.token is None and lk.validity == 0.0 for lk in locks)
    for name in names:
        assert_no_key(masters5, name, "after release_many")


def test_batch_locks_are_ordinary_locks(engine, make_redlock, masters5, key):
    """A Lock from acquire_many extends, releases alone, is known to inspect() and to close()."""
    names = batch_names(key, 4)
    rl = make_redlock(urls(masters5), master_timeout=MT)
    a, b, c, d = rl.acquire_many(names, 5)
    assert all(s.ours for s in rl.inspect(names[0])), rl.inspect(names[0])
    a.extend(30)
    assert_pttl_between(masters5, a.key, 27500, 30000)
    assert 28 < a.validity <= 30
    b.release()
    assert_no_key(masters5, names[1])
    assert_values(masters5, names[0], a.token)
    rl.release_many([a, c])
    assert not a.held and not c.held and d.held
    for name in names[:3]:
        assert_no_key(masters5, name)
    assert_values(masters5, names[3], d.token)
    rl.close()  # releases what is still held: d
    assert not d.held
    assert_no_keys_at_all(masters5, "after close()")


# -- taken names ----------------------------------------------------------------------------------


def test_names_taken_on_a_majority_get_none(engine, make_redlock, masters5, key):
    names = batch_names(key, 8)
    taken_where = {1: masters5[:3], 4: masters5[2:], 6: masters5}  # majorities of 5
    for i, servers in taken_where.items():
        set_foreign(servers, names[i])
    rl = make_redlock(urls(masters5), master_timeout=MT)

    locks = rl.acquire_many(names, 10)

    assert len(locks) == len(names)
    assert [i for i, lk in enumerate(locks) if lk is None] == sorted(taken_where)
    for i, lk in enumerate(locks):
        if i in taken_where:
            taken = taken_where[i]
            free = [m for m in masters5 if m not in taken]
            assert_foreign_intact(taken, names[i])
            # our SET landed on the free masters; the unlock round removed it
            assert_no_key(free, names[i], "(a name not acquired must be unlocked everywhere)")
        else:
            assert lk.held and lk.name == names[i]
            assert_values(masters5, names[i], lk.token)
    rl.release_many([lk for lk in locks if lk is not None])
    for i, name in enumerate(names):
        if i in taken_where:
            assert_foreign_intact(taken_where[i], name)
        else:
            assert_no_key(masters5, name)


@pytest.mark.parametrize("n", [3, 5])
def test_each_name_judged_on_its_own_quorum(engine, make_redlock, masters5, key, n):
    """One name per subset of the masters holding a foreign key: with 3 masters a name taken on 1
    is acquired (2 of 3), a name taken on 2 is not; one batch covers every subset."""
    masters = masters5[:n]
    quorum = n // 2 + 1
    masks = range(2**n)
    names = [f"{key}:taken{format(mask, f'0{n}b')[::-1]}" for mask in masks]
    taken = {mask: [m for i, m in enumerate(masters) if mask >> i & 1] for mask in masks}
    free = {mask: [m for i, m in enumerate(masters) if not mask >> i & 1] for mask in masks}
    for mask in masks:
        set_foreign(taken[mask], names[mask])
    rl = make_redlock(urls(masters), master_timeout=MT)

    locks = rl.acquire_many(names, 10)

    assert len(locks) == len(names)
    for mask, (name, lk) in enumerate(zip(names, locks)):
        should = len(free[mask]) >= quorum
        assert (lk is not None) is should, f"{name}: got {lk!r} with {len(free[mask])} free of {n}"
        assert_foreign_intact(taken[mask], name)
        if lk is None:
            assert_no_key(free[mask], name, "(not acquired: unlocked where it was set)")
        else:
            assert lk.name == name and lk.held
            assert_values(free[mask], name, lk.token)
    rl.release_many([lk for lk in locks if lk is not None])  # a quorum held each: no LockLost
    for mask, name in enumerate(names):
        assert_foreign_intact(taken[mask], name)
        assert_no_key(free[mask], name, "after release_many")


# -- one round trip -------------------------------------------------------------------------------


def test_one_set_per_name_per_master_and_the_releases_batched(engine, make_redlock, masters5, key):
    """One SET per name on each master; the releases go as batched scripts
    (SCRIPT_BATCH_ITEMS names a command), not one script call per name."""
    masters = masters5[:3]
    names = batch_names(key, 50)
    rl = make_redlock(urls(masters), master_timeout=MT)
    sets0 = [calls(m, "set") for m in masters]
    scripts0 = [script_calls(m) for m in masters]

    locks = rl.acquire_many(names, 10)
    assert None not in locks

    # The master beyond the quorum may still be working through the batch: wait for it, then
    # count exactly.
    wait_until(
        lambda: all(calls(m, "set") - s0 >= 50 for m, s0 in zip(masters, sets0)),
        1.0,
        "every master received the batch's 50 SETs",
    )
    assert [calls(m, "set") - s0 for m, s0 in zip(masters, sets0)] == [50] * 3
    assert [script_calls(m) - s0 for m, s0 in zip(masters, scripts0)] == [0] * 3  # no unlock
    assert [m.admin().dbsize() for m in masters] == [50] * 3

    sets1 = [calls(m, "set") for m in masters]
    rl.release_many(locks)
    assert_no_keys_at_all(masters, "after release_many")
    # (the memory masters of hiredlock.testing count each name's script run, not commands)
    batches = 50 if engine == "memory" else math.ceil(50 / SCRIPT_BATCH_ITEMS)
    assert [script_calls(m) - s0 for m, s0 in zip(masters, scripts0)] == [batches] * 3
    assert [calls(m, "set") for m in masters] == sets1
    assert not any(lk.held for lk in locks)


LATENCY = 0.2


@pytest.fixture
def slow_links(masters5):
    """Three masters behind a proxy that delays every request by LATENCY (not replies)."""
    proxy = FaultProxy([("127.0.0.1", m.port) for m in masters5[:3]])
    try:
        proxy.set_mode(range(3), "latency", ms=LATENCY * 1000, direction="up")
        yield [proxy.url(i) for i in range(3)]
    finally:
        proxy.close()


def test_batch_is_one_round_trip(engine, slow_links, make_redlock, masters5, key):
    """Every request reaches its master LATENCY late: a batch of 50 that takes less than two
    latencies went as one round trip (in parallel to all masters); 50 sequential SETs would
    take 10 s and time out against master_timeout=MT."""
    masters = masters5[:3]
    names = batch_names(key, 50)
    rl = make_redlock(slow_links, master_timeout=MT)
    rl.release_many(rl.acquire_many([key + ":warm-up"], 10))  # connect; load the script

    t0 = time.monotonic()
    locks = rl.acquire_many(names, 10)
    took = time.monotonic() - t0
    assert None not in locks, locks
    assert LATENCY <= took < 2 * LATENCY + EXTRA_SLACK, took
    for lk in locks:
        # validity counts the round from before its first write: the latency is taken off
        assert 10 - drift_s(10) - took - 0.5 - EXTRA_SLACK < lk.validity
        assert lk.validity <= 10 - drift_s(10) - LATENCY, lk.validity

    t0 = time.monotonic()
    rl.release_many(locks)
    took = time.monotonic() - t0
    assert LATENCY <= took < 2 * LATENCY + EXTRA_SLACK, took
    assert_no_keys_at_all(masters, "after release_many")


# -- failures -------------------------------------------------------------------------------------


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "warm"])
def test_dead_majority_raises_quorum_unreachable(engine, make_redlock, masters5, key, warm):
    masters = masters5[:3]
    live, dead = masters[0], masters[1:]
    names = batch_names(key, 10)
    rl = make_redlock(urls(masters), master_timeout=MT)
    if warm:  # connections open before the masters die
        rl.release_many(rl.acquire_many([key + ":warm-up"], 5))
    for m in dead:
        m.kill()

    with pytest.raises(QuorumUnreachable) as ei:
        rl.acquire_many(names, 5)

    assert isinstance(ei.value, LockNotAcquired)
    assert len(ei.value.votes) == 3
    for m in dead:
        assert vote_for(ei.value.votes, m).outcome in FAILED, ei.value.votes
    # every name's SET landed on the live master; the unlock round removed them all
    assert_no_keys_at_all([live], "on the live master after QuorumUnreachable")


def test_unreachable_names_do_not_fail_the_batch(engine, make_redlock, redis_factory):
    """Names refused with an error (NOPERM: the ACL user may only touch ok:* on 2 of 3 masters)
    get None while the others are acquired; only a batch where every name is unreachable
    raises QuorumUnreachable."""
    servers = redis_factory(3)
    for s, pattern in zip(servers, ["~ok:*", "~ok:*", "~*"]):
        s.admin().execute_command("ACL", "SETUSER", "lim", "reset", "on", ">pw", pattern, "+@all")
    rl = make_redlock([f"redis://lim:pw@127.0.0.1:{s.port}/0" for s in servers], master_timeout=MT)

    ok, refused = rl.acquire_many(["ok:a", "no:b"], 5)
    assert ok is not None and ok.held
    assert refused is None
    assert_values(servers, "ok:a", ok.token)
    assert_no_key(servers[2:], "no:b", "(unlocked where it was set)")

    with pytest.raises(QuorumUnreachable) as ei:
        rl.acquire_many(["no:c", "no:d"], 5)
    for s in servers[:2]:
        v = vote_for(ei.value.votes, s)
        assert v.outcome == Outcome.ERROR and v.detail.startswith("NOPERM"), ei.value.votes
    assert_no_key(servers[2:], "no:c")
    assert_no_key(servers[2:], "no:d")

    rl.release_many([ok])
    assert_no_keys_at_all(servers, "after release_many")


@pytest.mark.parametrize("how", ["deleted", "overwritten"])
def test_release_many_with_a_lost_lock(engine, make_redlock, masters5, key, how):
    masters = masters5[:3]
    names = batch_names(key, 5)
    rl = make_redlock(urls(masters), master_timeout=MT)
    locks = rl.acquire_many(names, 10)
    assert None not in locks
    settle(masters, locks)
    lost = locks[2]
    if how == "deleted":
        for m in masters[:2]:
            assert m.admin().delete(lost.key) == 1
    else:
        set_foreign(masters[:2], lost.key)

    with pytest.raises(LockLost) as ei:
        rl.release_many(locks)

    msg = str(ei.value)
    assert repr(names[2]) in msg, msg
    assert "1 of 5" in msg, msg
    for i in (0, 1, 3, 4):
        assert repr(names[i]) not in msg, msg
    votes = ei.value.votes
    assert len(votes) == 3
    assert [vote_for(votes, m).outcome for m in masters] == [
        Outcome.TAKEN,
        Outcome.TAKEN,
        Outcome.OK,  # the one master that still held our token released it
    ], votes
    assert tuple(lost.last_votes) == tuple(votes)
    assert not any(lk.held for lk in locks)
    if how == "overwritten":
        assert_foreign_intact(masters[:2], lost.key)
        assert_no_key(masters[2:], lost.key)
    else:
        assert_no_keys_at_all(masters, "(the other locks are released all the same)")
    for i in (0, 1, 3, 4):
        assert_no_key(masters, names[i], "(released despite the LockLost of another)")


def test_release_many_names_every_lost_lock(engine, make_redlock, masters5, key):
    masters = masters5[:3]
    names = batch_names(key, 6)
    rl = make_redlock(urls(masters), master_timeout=MT)
    locks = rl.acquire_many(names, 10)
    settle(masters, locks)
    for i in (1, 4):
        for m in masters[1:]:
            assert m.admin().delete(names[i]) == 1
    with pytest.raises(LockLost) as ei:
        rl.release_many(locks)
    msg = str(ei.value)
    assert "2 of 6" in msg and repr(names[1]) in msg and repr(names[4]) in msg, msg
    assert [vote_for(ei.value.votes, m).outcome for m in masters] == [
        Outcome.OK,
        Outcome.TAKEN,
        Outcome.TAKEN,
    ]
    assert_no_keys_at_all(masters, "after release_many")


@pytest.mark.parametrize("case", ["unheld-in-the-middle", "same-lock-twice"])
def test_release_many_with_a_lock_not_held_leaves_no_lock_in_limbo(
    engine, make_redlock, masters5, key, case
):
    """NotHeld (as lock.release() raises) for a lock that is not held, ValueError for a lock given
    twice, both before anything is let go: every other lock is still held, its keys on the
    masters (it was once forgotten by its Lock object while its keys stayed until the ttl)."""
    masters = masters5[:3]
    rl = make_redlock(urls(masters), master_timeout=MT)
    a, b, c = rl.acquire_many(batch_names(key, 3), 10)
    tokens = {lk.key: lk.token for lk in (a, b, c)}
    if case == "unheld-in-the-middle":
        b.release()
        batch = [a, b, c]
    else:
        batch = [a, a, c]
    with pytest.raises(NotHeld if case == "unheld-in-the-middle" else ValueError):
        rl.release_many(batch)
    for lk in (a, c):
        assert lk.held
        assert_values(masters, lk.key, tokens[lk.key], "(still held)")
    rl.release_many([a, c] if case == "unheld-in-the-middle" else [a, b, c])
    assert_no_keys_at_all(masters, "after releasing the rest")


# -- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "names",
    [
        pytest.param(["a", "b", "a"], id="str"),
        pytest.param([b"a", b"b", b"b"], id="bytes"),
        pytest.param(["a", b"a"], id="str-and-its-bytes"),
    ],
)
def test_repeated_names_are_a_value_error(canary_redlock, canary, names):
    with pytest.raises(ValueError, match="names must not repeat"):
        canary_redlock.acquire_many(names, 5)
    assert not canary.touched()


@pytest.mark.parametrize(
    "bad",
    [
        pytest.param(None, id="none"),
        pytest.param(1, id="int"),
        pytest.param(1.5, id="float"),
        pytest.param(["x"], id="list"),
        pytest.param(object(), id="object"),
        pytest.param("", id="empty-str"),
        pytest.param(b"", id="empty-bytes"),
    ],
)
def test_bad_name_raises_as_lock_does(canary_redlock, canary, bad):
    with pytest.raises((TypeError, ValueError)) as single:
        canary_redlock.lock(bad, 5)
    with pytest.raises((TypeError, ValueError)) as batch:
        canary_redlock.acquire_many(["fine", bad, "also-fine"], 5)
    assert type(batch.value) is type(single.value)
    assert str(batch.value) == str(single.value)
    assert "name" in str(batch.value)
    if not isinstance(bad, (str, bytes)):
        assert isinstance(batch.value, TypeError)
    assert not canary.touched()


def test_bad_ttl_raises_before_io(canary_redlock, canary):
    with pytest.raises(ValueError, match="ttl"):
        canary_redlock.acquire_many(["a", "b"], 0)
    with pytest.raises(TypeError, match="ttl"):
        canary_redlock.acquire_many(["a", "b"], "10")
    assert not canary.touched()


def test_a_single_name_is_not_a_batch(canary_redlock, canary):
    for names in ("abc", b"abc"):
        with pytest.raises(TypeError, match="iterable of names"):
            canary_redlock.acquire_many(names, 5)
    assert not canary.touched()


def test_bad_ttl_is_refused_for_an_empty_batch_too(canary_redlock, canary):
    with pytest.raises(ValueError, match="ttl"):
        canary_redlock.acquire_many([], 0)
    assert not canary.touched()


def test_release_many_takes_this_redlocks_locks(engine, make_redlock, masters5, key):
    masters = masters5[:3]
    mine, other = make_redlock(urls(masters), master_timeout=MT), make_redlock(urls(masters))
    (a,) = mine.acquire_many([key + ":mine"], 10)
    (b,) = other.acquire_many([key + ":other"], 10)
    for bad in ([a, b], [a, "not a lock"]):
        with pytest.raises(ValueError, match=r"Locks of this (Async)?Redlock"):
            mine.release_many(bad)
    assert a.held and b.held
    mine.release_many([a])
    other.release_many([b])
    assert_no_keys_at_all(masters, "after each Redlock released its own")


def test_empty_batches_do_nothing(canary_redlock, canary):
    assert canary_redlock.acquire_many([], 5) == []
    assert canary_redlock.acquire_many(iter(()), 5) == []
    assert canary_redlock.release_many([]) is None
    assert canary_redlock.release_many(iter(())) is None
    assert not canary.touched()


# -- a big batch ----------------------------------------------------------------------------------


def test_batch_of_100(engine, make_redlock, masters5, key):
    names = batch_names(key, 100)
    rl = make_redlock(urls(masters5), master_timeout=MT)
    locks = rl.acquire_many(iter(names), 10)  # any iterable
    assert len(locks) == 100
    assert None not in locks
    assert [lk.name for lk in locks] == names
    assert len({lk.token for lk in locks}) == 100
    wait_until(
        lambda: all(m.admin().dbsize() == 100 for m in masters5), 1.0, "100 keys on every master"
    )
    for m in masters5:
        got = m.admin().mget(names)
        assert got == [lk.token.encode() for lk in locks], f"port {m.port}"
    rl.release_many(locks)
    assert not any(lk.held for lk in locks)
    assert_no_keys_at_all(masters5, "after releasing the batch of 100")
