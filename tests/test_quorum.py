"""Acceptance 1: quorum.  For N = 1..5 masters and every subset of them already holding the key
(a foreign value with a 60 s expiry), a non-blocking acquire succeeds iff at least N//2+1 masters
are free; foreign keys are never touched; a failed attempt leaves no key of ours anywhere; a
release after success leaves no key of ours anywhere."""

from __future__ import annotations

import pytest
from apis import make_redlock_fixture, pytest_generate_tests  # noqa: F401  (sync and async APIs)
from support import (
    FOREIGN,
    TOKEN_RE,
    assert_foreign_intact,
    assert_no_key,
    assert_values,
    open_connections,
    set_foreign,
    urls,
    values,
    wait_until,
)

CASES = [(n, mask) for n in range(1, 6) for mask in range(2**n)]


def _id(case):
    n, mask = case
    return f"n{n}-taken{format(mask, f'0{n}b')[::-1]}"


def check_quorum_mask(
    make_redlock, masters, addresses, key, taken_mask, down_mask=0, open_first=False
):
    """One mask: the masters whose bit is set in `taken_mask` hold a foreign value, those in
    `down_mask` are killed (the two never overlap); the client names the masters `addresses`
    (URLs, dicts, ...).  A non-blocking acquire succeeds iff a quorum is free; it raises
    QuorumUnreachable iff so many are down that no quorum could answer, and returns False
    otherwise.  Returns the attempt's votes (one per master, in order).  open_first: the
    client's connections are opened before the acquire (support.open_connections: for TLS
    masters, whose handshakes may end after the acquire's round)."""
    from hiredlock import QuorumUnreachable

    assert not taken_mask & down_mask
    n = len(masters)
    taken = [m for i, m in enumerate(masters) if taken_mask >> i & 1]
    down = [m for i, m in enumerate(masters) if down_mask >> i & 1]
    free = [m for i, m in enumerate(masters) if not (taken_mask | down_mask) >> i & 1]
    set_foreign(taken, key)
    for m in down:
        m.kill()

    rl = make_redlock(addresses, retry_count=1, retry_delay=0.01)
    if open_first:
        open_connections(rl)  # (the killed masters' connects fail, as the acquire's would)
    assert rl.quorum == n // 2 + 1
    lock = rl.lock(key, 10)
    unreachable = len(down) > n - rl.quorum
    if unreachable:
        with pytest.raises(QuorumUnreachable) as caught:
            lock.acquire(blocking=False)
        got, votes = False, caught.value.votes
    else:
        got = lock.acquire(blocking=False)
        votes = lock.last_votes

    should = len(free) >= n // 2 + 1
    assert got is should, f"acquire() returned {got!r} with {len(free)} free of {n}"
    assert_foreign_intact(taken, key)
    if got:
        assert lock.held
        assert TOKEN_RE.match(lock.token), lock.token
        assert_values(free, key, lock.token)
        assert 0 < lock.validity <= 10
        lock.release()
        assert not lock.held
        assert lock.validity == 0.0
    else:
        assert not lock.held
        assert lock.validity == 0.0
        # A failed attempt unlocks every master: the free ones hold nothing of ours.
    assert_no_key(free, key, "after " + ("release" if got else "failed acquire"))
    assert_foreign_intact(taken, key)
    return votes


@pytest.mark.parametrize("n,mask", CASES, ids=[_id(c) for c in CASES])
def test_quorum_masks(engine, make_redlock, masters5, key, n, mask):
    masters = masters5[:n]
    check_quorum_mask(make_redlock, masters, urls(masters), key, mask)


@pytest.mark.parametrize("n", [2, 3, 4, 5])
def test_quorum_value(engine, make_redlock, masters5, n):
    rl = make_redlock(urls(masters5[:n]))
    assert rl.quorum == n // 2 + 1
    assert rl.backend == engine
    assert len(rl.masters) == n


def test_free_after_foreign_expires(engine, make_redlock, masters5, key):
    """Blocking acquire waits while the lock is taken and gets it once the holder's keys expire."""
    set_foreign(masters5, key, px=300)
    rl = make_redlock(urls(masters5), retry_delay=0.02)
    lock = rl.lock(key, 5)
    assert lock.acquire(timeout=10) is True
    ours = lock.token.encode()
    # The foreign keys expire one master after the other and a quorum of them gone is enough:
    # the masters that refused us may hold the foreign key for the rest of its own ttl.
    vals = values(masters5, key)
    assert vals.count(ours) >= 3, vals
    assert set(vals) <= {ours, None, FOREIGN}, vals
    wait_until(lambda: FOREIGN not in values(masters5, key), 2, "the foreign keys' expiry")
    vals = values(masters5, key)
    assert vals.count(ours) >= 3, vals
    assert set(vals) <= {ours, None}, vals
    lock.release()
    assert_no_key(masters5, key)


def test_blocking_timeout_returns_false(engine, make_redlock, masters5, key):
    """timeout=T: keeps trying while taken, then returns False (upper time bound only)."""
    import time

    set_foreign(masters5, key)
    rl = make_redlock(urls(masters5), retry_delay=0.02)
    lock = rl.lock(key, 5)
    t0 = time.monotonic()
    assert lock.acquire(timeout=0.3) is False
    assert time.monotonic() - t0 <= 0.3 + 0.02 * 1.5 + 0.1 + 0.25
    assert_foreign_intact(masters5, key)
    assert not lock.held


def test_two_locks_same_name_exclusive(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    a, b = rl.lock(key, 5), rl.lock(key, 5)
    assert a.acquire(blocking=False)
    assert b.acquire(blocking=False) is False
    assert a.held and not b.held
    a.release()
    assert b.acquire(blocking=False)
    assert a.token != b.token
    b.release()
    assert_no_key(masters5, key)


def test_many_names_independent(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    locks = [rl.lock(f"{key}:{i}", 5) for i in range(20)]
    for lk in locks:
        assert lk.acquire(blocking=False)
    assert len({lk.token for lk in locks}) == 20
    for lk in locks:
        lk.release()
    for i in range(20):
        assert_no_key(masters5, f"{key}:{i}")


def test_context_manager_lock(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    lock = rl.lock(key, 5)
    with lock as entered:
        assert lock.held
        assert entered is None or entered is lock
        tok = lock.token
        assert_values(masters5, key, tok)
    assert not lock.held
    assert_no_key(masters5, key)


def test_bytes_name_is_the_key(engine, make_redlock, masters5):
    rl = make_redlock(urls(masters5))
    name = b"raw\x00\xffkey"
    lock = rl.lock(name, 5)
    assert lock.key == name
    assert lock.name == name
    assert lock.acquire(blocking=False)
    assert_values(masters5, name, lock.token)
    lock.release()
    assert_no_key(masters5, name)


def test_str_name_is_the_key(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    name = key + ":é"
    lock = rl.lock(name, 5)
    assert lock.key == name.encode("utf-8")
    assert lock.name == name
    assert lock.acquire(blocking=False)
    # (eventually: the round may have ended on a quorum before this master answered)
    assert_values(masters5[:1], name, lock.token)
    lock.release()


def test_lock_attributes_before_acquire(engine, make_redlock, masters5, key):
    from datetime import timedelta

    rl = make_redlock(urls(masters5))
    lock = rl.lock(key, timedelta(milliseconds=1500))
    assert lock.ttl == pytest.approx(1.5)
    assert isinstance(lock.ttl, float)
    assert lock.held is False
    assert lock.token is None
    assert lock.validity == 0.0
    assert lock.key == key.encode()
