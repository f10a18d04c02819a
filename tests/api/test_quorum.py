"""Quorum.  For N = 1..5 masters and every subset of them already holding the key
(a foreign value with a 60 s expiry), a non-blocking acquire succeeds iff at least N//2+1 masters
are free; foreign keys are never touched; a failed attempt leaves no key of ours anywhere; a
release after success leaves no key of ours anywhere."""

from __future__ import annotations

import pytest
from apis import make_redlock_fixture, pytest_generate_tests  # noqa: F401  (sync and async APIs)
from support import (
    FOREIGN,
    assert_foreign_intact,
    assert_no_key,
    assert_values,
    check_quorum_mask,
    set_foreign,
    urls,
    values,
    wait_until,
)

CASES = [(n, mask) for n in range(1, 6) for mask in range(2**n)]


def _id(case):
    n, mask = case
    return f"n{n}-taken{format(mask, f'0{n}b')[::-1]}"


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
