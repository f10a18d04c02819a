"""Release never deletes another holder's key; extend never revives an expired key;
both survive SCRIPT FLUSH (EVALSHA -> NOSCRIPT -> EVAL).  Plus NotHeld semantics."""

from __future__ import annotations

import logging
import time

import pytest
from apis import make_redlock_fixture, pytest_generate_tests  # noqa: F401  (sync and async APIs)
from features_support import script_calls
from support import (
    assert_foreign_intact,
    assert_no_key,
    assert_pttl_between,
    assert_values,
    debug_sleep,
    set_foreign,
    urls,
    values,
    wait_until,
)

from hiredlock import LockLost, NotHeld, Outcome, TooManyExtensions


def test_release_after_overwrite_all_is_lock_lost(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    lock = rl.lock(key, 5)
    assert lock.acquire(blocking=False)
    set_foreign(masters5, key)  # someone else holds it everywhere now
    with pytest.raises(LockLost) as ei:
        lock.release()
    assert_foreign_intact(masters5, key)
    assert len(ei.value.votes) == 5
    assert all(v.outcome != Outcome.OK for v in ei.value.votes), ei.value.votes
    assert not lock.held


@pytest.mark.parametrize("overwritten", [1, 2, 3, 4])
def test_release_after_partial_overwrite(engine, make_redlock, masters5, key, overwritten):
    rl = make_redlock(urls(masters5))
    lock = rl.lock(key, 5)
    assert lock.acquire(blocking=False)
    foreign, ours = masters5[:overwritten], masters5[overwritten:]
    set_foreign(foreign, key)
    if len(ours) >= 3:
        lock.release()
    else:
        with pytest.raises(LockLost):
            lock.release()
    assert_foreign_intact(foreign, key)
    assert_no_key(ours, key, "(our own keys must still be deleted)")


def test_release_after_expiry_is_lock_lost(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    lock = rl.lock(key, 0.1)
    assert lock.acquire(blocking=False)
    wait_until(lambda: all(m.admin().exists(key) == 0 for m in masters5), 5, "keys expired")
    with pytest.raises(LockLost):
        lock.release()
    assert_no_key(masters5, key)


def test_release_after_expiry_and_retake_keeps_new_holder(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    old = rl.lock(key, 0.1)
    assert old.acquire(blocking=False)
    wait_until(lambda: all(m.admin().exists(key) == 0 for m in masters5), 5, "keys expired")
    new = rl.lock(key, 5)
    assert new.acquire(blocking=False)
    with pytest.raises(LockLost):
        old.release()
    assert_values(masters5, key, new.token)
    new.release()
    assert_no_key(masters5, key)


def test_extend_rearms_ttl(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    lock = rl.lock(key, 1)
    assert lock.acquire(blocking=False)
    tok = lock.token
    lock.extend(30)
    assert lock.token == tok
    assert_values(masters5, key, tok)
    assert_pttl_between(masters5, key, 27500, 30000)
    assert 28 < lock.validity <= 30
    lock.extend()  # default: the lock's own ttl (1 s)
    assert_pttl_between(masters5, key, 0, 1000)
    assert lock.validity <= 1
    lock.release()
    assert_no_key(masters5, key)


def test_extend_after_expiry_is_lock_lost_and_does_not_recreate(
    engine, make_redlock, masters5, key
):
    rl = make_redlock(urls(masters5))
    lock = rl.lock(key, 0.1)
    assert lock.acquire(blocking=False)
    wait_until(lambda: all(m.admin().exists(key) == 0 for m in masters5), 5, "keys expired")
    with pytest.raises(LockLost) as ei:
        lock.extend(10)
    assert all(v.outcome != Outcome.OK for v in ei.value.votes), ei.value.votes
    assert_no_key(masters5, key, "(extend must not recreate an expired key)")
    assert not lock.held
    # a lock that failed to extend is not ours: a later release cannot succeed
    with pytest.raises((LockLost, NotHeld)):
        lock.release()
    assert_no_key(masters5, key)


def test_extend_after_overwrite_is_lock_lost(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    lock = rl.lock(key, 5)
    assert lock.acquire(blocking=False)
    tok = lock.token.encode()
    set_foreign(masters5[:3], key, px=60000)
    with pytest.raises(LockLost):
        lock.extend(30)
    assert_foreign_intact(masters5[:3], key)  # foreign ttl not re-armed to 30 s
    for m in masters5[3:]:
        # our minority keys may or may not have been extended; they must still be ours
        assert m.admin().get(key) == tok
    assert not lock.held


def test_extend_on_minority_overwrite_succeeds(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    lock = rl.lock(key, 5)
    assert lock.acquire(blocking=False)
    tok = lock.token
    set_foreign(masters5[:2], key)
    lock.extend(20)
    assert_foreign_intact(masters5[:2], key)
    assert_values(masters5[2:], key, tok)
    assert_pttl_between(masters5[2:], key, 17500, 20000)
    lock.release()
    assert_foreign_intact(masters5[:2], key)
    assert_no_key(masters5[2:], key)


def test_not_held(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    lock = rl.lock(key, 5)
    with pytest.raises(NotHeld):
        lock.release()
    with pytest.raises(NotHeld):
        lock.extend()
    assert issubclass(NotHeld, RuntimeError)
    assert lock.acquire(blocking=False)
    lock.release()
    with pytest.raises(NotHeld):
        lock.release()
    with pytest.raises(NotHeld):
        lock.extend()
    # a failed acquire does not make it held either
    set_foreign(masters5, key)
    assert lock.acquire(blocking=False) is False
    with pytest.raises(NotHeld):
        lock.release()
    assert_foreign_intact(masters5, key)


def test_lock_object_reusable(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    lock = rl.lock(key, 5)
    tokens = set()
    for _ in range(5):
        assert lock.acquire(blocking=False)
        tokens.add(lock.token)
        lock.release()
        assert lock.token is None or not lock.held
    assert len(tokens) == 5
    assert_no_key(masters5, key)


def _script_flush(masters):
    for m in masters:
        m.admin().script_flush()


def test_scripts_survive_script_flush(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    warm = rl.lock(key + ":warm", 5)
    assert warm.acquire(blocking=False)
    warm.extend()
    warm.release()  # scripts now cached by the servers and presumably sent as EVALSHA
    _script_flush(masters5)

    lock = rl.lock(key, 5)
    assert lock.acquire(blocking=False)
    lock.extend(20)
    assert_pttl_between(masters5, key, 17500, 20000)
    _script_flush(masters5)
    lock.release()
    assert_no_key(masters5, key)

    # The unlock after a failed attempt also falls back to EVAL.
    lock2 = rl.lock(key + ":2", 5)
    set_foreign(masters5[:3], key + ":2")
    _script_flush(masters5)
    assert lock2.acquire(blocking=False) is False
    assert_foreign_intact(masters5[:3], key + ":2")
    assert_no_key(masters5[3:], key + ":2", "(unlock after a failed attempt, after SCRIPT FLUSH)")

    # Only some masters flushed.
    lock3 = rl.lock(key + ":3", 5)
    assert lock3.acquire(blocking=False)
    _script_flush(masters5[::2])
    lock3.extend(10)
    _script_flush(masters5[1::2])
    lock3.release()
    assert_no_key(masters5, key + ":3")


def test_script_flush_fresh_client(engine, make_redlock, masters5, key):
    """First release ever on connections where the script was never loaded."""
    _script_flush(masters5)
    rl = make_redlock(urls(masters5))
    lock = rl.lock(key, 5)
    assert lock.acquire(blocking=False)
    lock.release()
    assert_no_key(masters5, key)


def test_release_does_not_wait_for_expiry(engine, make_redlock, masters5, key):
    """After release another client gets the lock at once."""
    rl = make_redlock(urls(masters5))
    a = rl.lock(key, 30)
    assert a.acquire(blocking=False)
    a.release()
    b = make_redlock(urls(masters5)).lock(key, 30)
    t0 = time.monotonic()
    assert b.acquire(blocking=False)
    assert time.monotonic() - t0 < 1
    b.release()


def test_extend_reaches_masters_slower_than_the_quorum(engine, make_redlock, masters5, key):
    """extend re-arms the ttl on all masters, including those that answer after the quorum
    decided -- even when their first answer is NOSCRIPT (scripts flushed), which needs a second
    command (EVAL) to take effect.  Two masters are made ~60 ms slow with DEBUG SLEEP."""
    rl = make_redlock(urls(masters5), master_timeout=0.2)
    lock = rl.lock(key, 5)
    assert lock.acquire(blocking=False)
    _script_flush(masters5)
    socks = debug_sleep(masters5[3:], 0.1)
    try:
        lock.extend(20)
    finally:
        for s in socks:
            s.close()
    assert_pttl_between(masters5, key, 17500, 20000, "(extend must reach every live master)")
    lock.release()
    assert_no_key(masters5, key)


@pytest.mark.parametrize("scripts", ["cached", "flushed"])
def test_unlock_after_failed_attempt_reaches_slow_master(
    engine, make_redlock, masters5, key, scripts
):
    """A failed attempt unlocks every master, also one that answers after the attempt was decided
    (here: 100 ms late, past master_timeout): its SET is applied late and must still be undone.
    "flushed": the slow master's first answer to the unlock is NOSCRIPT (SCRIPT FLUSH), so an
    EVALSHA alone does not undo anything.  The library gets one more round on the same Redlock
    (another name) to catch up on late replies before we check."""
    a, b, slow = masters5[:3]
    rl = make_redlock(urls([a, b, slow]), master_timeout=0.05, retry_count=1)
    warm = rl.lock(key + ":warm", 10)
    assert warm.acquire(blocking=False)
    warm.extend()
    warm.release()  # scripts cached on all three
    if scripts == "flushed":
        _script_flush([a, b, slow])
    set_foreign([a, b], key)
    socks = debug_sleep([slow], 0.1)
    try:
        r = rl.lock(key, 10).acquire(blocking=False)
    except Exception as exc:  # QuorumUnreachable is acceptable too
        from hiredlock import LockNotAcquired

        assert isinstance(exc, LockNotAcquired)
        r = False
    finally:
        for s in socks:
            s.close()
    assert r is False
    wait_until(lambda: slow.admin().ping(), 5, "slow master awake")
    other = rl.lock(key + ":other", 10)
    if other.acquire(blocking=False):
        other.release()
    assert_foreign_intact([a, b], key)
    assert_no_key([slow], key, "(our SET on the late master was never undone)")


def test_late_noscript_of_a_failed_fenced_acquire_is_not_run_after_its_unlock(
    engine, make_redlock, masters5, key
):
    """A fenced acquire is a script. On a master that answers after the attempt failed, its
    reply says NOSCRIPT (the cache was flushed): the attempt's unlock already ran there, so
    sending the acquire's EVAL then would set a key nobody holds, for the whole ttl."""
    a, b, slow = masters5[:3]
    rl = make_redlock(urls([a, b, slow]), master_timeout=0.05, retry_count=1)
    warm = rl.lock(key + ":warm", 10, fencing=True)
    assert warm.acquire(blocking=False)
    warm.release()  # the fenced acquire is cached on every connection; the unlock is not yet
    _script_flush([slow])
    set_foreign([a, b], key)
    socks = debug_sleep([slow], 0.1)
    try:
        assert rl.lock(key, 10, fencing=True).acquire(blocking=False) is False
    finally:
        for s in socks:
            s.close()
    wait_until(lambda: slow.admin().ping(), 5, "slow master awake")
    for _ in range(2):  # the late replies are read, then whatever they caused has run
        other = rl.lock(key + ":other", 10)
        assert other.acquire(blocking=False)
        other.release()
    assert_foreign_intact([a, b], key)
    assert_no_key([slow], key, "(the failed attempt's acquire ran after its unlock)")


@pytest.mark.parametrize("scripts", ["cached", "flushed"])
def test_release_reaches_slow_master(engine, make_redlock, masters5, key, scripts):
    """release() on 3 masters, one of them 100 ms late (past master_timeout): the two others make
    the quorum (no LockLost), and the late one must end up without our key too."""
    a, b, slow = masters5[:3]
    rl = make_redlock(urls([a, b, slow]), master_timeout=0.05)
    warm = rl.lock(key + ":warm", 10)
    assert warm.acquire(blocking=False)
    warm.extend()
    warm.release()
    lock = rl.lock(key, 10)
    assert lock.acquire(blocking=False)
    assert_values([a, b, slow], key, lock.token)
    if scripts == "flushed":
        _script_flush([a, b, slow])
    socks = debug_sleep([slow], 0.1)
    try:
        lock.release()
    finally:
        for s in socks:
            s.close()
    wait_until(lambda: slow.admin().ping(), 5, "slow master awake")

    def reached_the_late_master() -> bool:
        # The client's later rounds read the late master's replies (a NOSCRIPT among them, when
        # flushed: its EVAL goes at once). One round does it, unless the machine is loaded
        # enough that the late master's replies miss that round's master_timeout too: then the
        # next round reads them.
        other = rl.lock(key + ":other", 10)
        if other.acquire(blocking=False):
            other.release()
        return all(value is None for value in values([a, b, slow], key))

    wait_until(reached_the_late_master, 5, "the release to reach the late master")


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_close_does_not_warn_about_a_loss_already_raised(
    engine, make_redlock, masters5, key, caplog
):
    """A lock whose extend() or release() raised LockLost was handled by its caller: close()
    still unlocks what is left of it, without a warning."""
    rl = make_redlock(urls(masters5))
    extended, released = rl.lock(key, 30), rl.lock(key + ":released", 30)
    assert extended.acquire(blocking=False) and released.acquire(blocking=False)
    set_foreign(masters5[:3], key)  # a majority lost: extend fails, 2 masters still hold ours
    set_foreign(masters5, key + ":released")
    with pytest.raises(LockLost):
        extended.extend()
    with pytest.raises(LockLost):
        released.release()
    with caplog.at_level(logging.WARNING, logger="hiredlock"):
        rl.close()
    assert _warnings(caplog) == []
    assert_no_key(masters5[3:], key, "(close() still unlocks the masters that kept our key)")
    assert_foreign_intact(masters5[:3], key)


def test_close_warns_about_a_loss_it_finds(engine, make_redlock, masters5, key, caplog):
    rl = make_redlock(urls(masters5))
    lock = rl.lock(key, 30)
    assert lock.acquire(blocking=False)
    set_foreign(masters5, key)  # nobody told the holder
    with caplog.at_level(logging.WARNING, logger="hiredlock"):
        rl.close()
    assert any(f"releasing {key!r} on close failed" in m for m in _warnings(caplog)), _warnings(
        caplog
    )


def test_auto_renewals_are_not_counted_as_extensions(engine, make_redlock, masters5, key):
    """lock.extensions and max_extensions count extend() calls only; renewals are not counted
    anywhere (max_hold bounds them)."""
    rl = make_redlock(urls(masters5))
    lock = rl.lock(key, 1, auto_renew=True, max_extensions=1)
    assert lock.acquire(blocking=False)
    calls = script_calls(masters5)
    wait_until(
        lambda: all(n >= calls[port] + 2 for port, n in script_calls(masters5).items()),
        10,
        "two renewals on every master",
    )
    assert lock.held
    assert lock.extensions == 0
    lock.extend()
    assert lock.extensions == 1
    with pytest.raises(TooManyExtensions):
        lock.extend()
    lock.release()
