"""rl.locked(name) and rl.inspect(name) agree with the keys the masters actually hold:
all 2^5 masks of foreign keys, our own held lock (ours True exactly where our token is), another
client's lock, keys without expiry or of another type, and a dead master."""

from __future__ import annotations

import pytest
from apis import make_redlock_fixture, pytest_generate_tests  # noqa: F401  (sync and async APIs)
from features_support import MT, leakcheck_fixture  # noqa: F401  (fixture)
from support import FOREIGN, assert_values, urls

from hiredlock import KeyState, Outcome

PX = 60000


def port_of(state: KeyState) -> int:
    return int(state.master.rsplit(":", 1)[1].split("/")[0])


def states_by_master(rl, masters, key):
    states = rl.inspect(key)
    assert isinstance(states, list) and len(states) == len(masters)
    assert all(isinstance(s, KeyState) for s in states)
    # One state per master, in the order the masters were given.
    assert [port_of(s) for s in states] == [m.port for m in masters], states
    return states


def bits(mask):
    return [bool(mask >> i & 1) for i in range(5)]


def test_all_masks_of_foreign_keys(engine, make_redlock, masters5, key, leakcheck):
    rl = make_redlock(urls(masters5), master_timeout=MT)
    for mask in range(32):
        on = bits(mask)
        for m, here in zip(masters5, on):
            if here:
                assert m.admin().set(key, FOREIGN, px=PX)
            else:
                m.admin().delete(key)
        states = states_by_master(rl, masters5, key)
        for st, here, m in zip(states, on, masters5):
            ctx = f"mask {mask:05b} master {m.port}: {st}"
            assert st.outcome == Outcome.OK, ctx
            assert st.exists is here, ctx
            assert st.ours is False, ctx
            if here:
                assert st.pttl_ms is not None and 0 < st.pttl_ms <= PX, ctx
            else:
                assert st.pttl_ms is None, ctx
        assert rl.locked(key) is (sum(on) >= 3), f"mask {mask:05b}"
    for m in masters5:
        m.admin().delete(key)
    leakcheck.close_and_check(rl)


def test_own_lock_ours_where_our_token_is(engine, make_redlock, masters5, key, leakcheck):
    rl = make_redlock(urls(masters5), master_timeout=MT)
    other_rl = make_redlock(urls(masters5), master_timeout=MT)
    lock = rl.lock(key, 30)
    assert lock.acquire(blocking=False)
    token = lock.token.encode()
    assert_values(masters5, key, token)  # the masters beyond the quorum follow
    states = states_by_master(rl, masters5, key)
    assert all(s.exists and s.ours and 0 < s.pttl_ms <= 30000 for s in states), states
    assert rl.locked(key)
    # Another client sees the same keys, not as its own.
    theirs = states_by_master(other_rl, masters5, key)
    assert all(s.exists and s.ours is False for s in theirs), theirs
    assert other_rl.locked(key)
    for mask in range(32):  # mask: masters where a foreign value replaced our token
        on = bits(mask)
        for m, foreign in zip(masters5, on):
            assert m.admin().set(key, FOREIGN if foreign else token, px=PX)
        states = states_by_master(rl, masters5, key)
        for st, foreign, m in zip(states, on, masters5):
            ctx = f"mask {mask:05b} master {m.port}: {st}"
            assert st.outcome == Outcome.OK and st.exists is True, ctx
            assert st.ours is (not foreign), ctx
            assert 0 < st.pttl_ms <= PX, ctx
        assert rl.locked(key) is True
    for m in masters5:
        assert m.admin().set(key, token, px=PX)
    lock.release()
    # Released: the keys are gone and nothing is "ours" any more.
    states = states_by_master(rl, masters5, key)
    assert all(s.exists is False and s.ours is False for s in states), states
    assert rl.locked(key) is False
    leakcheck.close_and_check(rl, other_rl)


def test_odd_keys_and_a_dead_master(engine, make_redlock, masters5, key, leakcheck):
    rl = make_redlock(urls(masters5), master_timeout=0.1)
    a = [m.admin() for m in masters5]
    a[0].set(key, FOREIGN)  # no expiry
    a[1].hset(key, "f", "v")  # another type
    a[2].set(key, FOREIGN, px=PX)
    states = states_by_master(rl, masters5, key)
    assert states[0].exists is True and states[0].pttl_ms == -1 and states[0].ours is False
    assert states[1].exists is True and states[1].pttl_ms == -1 and states[1].ours is False
    assert states[2].exists is True and 0 < states[2].pttl_ms <= PX
    assert [s.exists for s in states[3:]] == [False, False]
    assert rl.locked(key) is True
    masters5[0].kill()
    states = states_by_master(rl, masters5, key)
    dead = states[0]
    assert dead.outcome in (Outcome.CONN_ERROR, Outcome.TIMEOUT), dead
    assert dead.exists is None and dead.pttl_ms is None and dead.ours is None, dead
    assert [s.outcome for s in states[1:]] == [Outcome.OK] * 4
    # Two of the four answering masters hold a key: not a majority of five.
    assert rl.locked(key) is False
    for x in a[1:]:
        x.delete(key)
    leakcheck.close_and_check(rl, servers=masters5[1:])


@pytest.mark.parametrize("n_on", [2, 3])
def test_locked_needs_a_majority(engine, make_redlock, masters5, key, leakcheck, n_on):
    rl = make_redlock(urls(masters5), master_timeout=MT)
    for m in masters5[:n_on]:
        m.admin().set(key, FOREIGN, px=PX)
    assert rl.locked(key) is (n_on >= 3)
    lk = rl.lock(key, 5)
    assert lk.acquire(blocking=False) is (n_on < 3)
    if n_on < 3:
        lk.release()
    for m in masters5:
        m.admin().delete(key)
    leakcheck.close_and_check(rl)


@pytest.mark.parametrize("px", [1000, 2**31 - 1, 2**31 + 1000, 10**12])
def test_inspect_large_pttl(engine, make_redlock, masters5, key, leakcheck, px):
    rl = make_redlock(urls(masters5), master_timeout=MT)
    for m in masters5[:3]:
        assert m.admin().set(key, FOREIGN, px=px)
    states = states_by_master(rl, masters5, key)
    for st in states[:3]:
        assert st.exists is True and st.ours is False, st
        assert px - 5000 < st.pttl_ms <= px, f"PX {px}: {st}"
    assert rl.locked(key) is True
    for m in masters5:
        m.admin().delete(key)
    leakcheck.close_and_check(rl)
