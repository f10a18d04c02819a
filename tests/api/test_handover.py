"""Hand-over by token: lock(name, ttl, token=...) adopts a lock another holder took, to extend,
check or release it; a wrong or expired token is LockLost, never a silent success. Owner labels:
stored with the token on the masters, shown by inspect()."""

from __future__ import annotations

import pytest
from apis import make_redlock_fixture, pytest_generate_tests, rwlock  # noqa: F401  (both APIs)
from support import (
    assert_foreign_intact,
    assert_no_key,
    assert_pttl_between,
    assert_values,
    set_foreign,
    urls,
    values,
    wait_until,
)

from hiredlock import AlreadyAcquired, LockLost, NotHeld, Outcome

OTHER_TOKEN = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize("fair", [False, True], ids=["lock", "fair"])
def test_adopted_lock_has_no_validity_until_extended_then_releases(
    engine, make_redlock, masters5, key, fair
):
    taker = make_redlock(urls(masters5)).lock(key, 10, fair=fair)
    assert taker.acquire(blocking=False)
    adopter = make_redlock(urls(masters5))
    adopted = adopter.lock(key, 10, token=taker.token, fair=fair)
    # when the taker took it is not known here: no validity until the masters prove it
    assert adopted.adopted and adopted.token == taker.token
    assert adopted.validity == 0.0 and not adopted.held
    adopted.extend(30)
    assert adopted.held and 25 < adopted.validity <= 30
    assert_pttl_between(masters5, key, 25_000, 30_000)
    adopted.release()
    assert_no_key(masters5, key)
    assert not adopted.adopted
    with pytest.raises(LockLost):  # the taker's lock was let go by the adopter
        taker.release()


def test_check_proves_validity_without_rearming(engine, make_redlock, masters5, key):
    taker = make_redlock(urls(masters5)).lock(key, 20)
    assert taker.acquire(blocking=False)
    adopted = make_redlock(urls(masters5)).lock(key, 60, token=taker.token)
    validity = adopted.check()
    assert 15 < validity <= 20, validity  # the taker's ttl, not the adopter's
    assert adopted.held and adopted.validity <= validity
    assert_pttl_between(masters5, key, 15_000, 20_000, "(check re-armed nothing)")
    assert adopted.extensions == 0
    # a holder may check its own lock too
    assert 15 < taker.check() <= 20


def test_wrong_token_is_lock_lost_and_touches_nothing(engine, make_redlock, masters5, key):
    set_foreign(masters5, key)
    rl = make_redlock(urls(masters5))
    for act in ("extend", "check", "release"):
        adopted = rl.lock(key, 10, token=OTHER_TOKEN)
        with pytest.raises(LockLost) as caught:
            getattr(adopted, act)()
        assert all(vote.outcome == Outcome.TAKEN for vote in caught.value.votes), act
        assert not adopted.held
        if act != "release":
            assert adopted.lost.is_set()
    assert_foreign_intact(masters5, key)


def test_expired_token_is_lock_lost_and_not_revived(engine, make_redlock, masters5, key):
    taker = make_redlock(urls(masters5)).lock(key, 0.2)
    assert taker.acquire(blocking=False)
    token = taker.token
    wait_until(lambda: all(v is None for v in values(masters5, key)), 5, "keys expired")
    adopted = make_redlock(urls(masters5)).lock(key, 10, token=token)
    with pytest.raises(LockLost):
        adopted.extend()
    assert_no_key(masters5, key, "(an extend never creates a key)")
    with pytest.raises(NotHeld):  # marked lost: nothing more to extend
        adopted.extend()


def test_acquire_on_adopted_lock_is_refused_until_released(engine, make_redlock, masters5, key):
    taker = make_redlock(urls(masters5)).lock(key, 10)
    assert taker.acquire(blocking=False)
    adopted = make_redlock(urls(masters5)).lock(key, 10, token=taker.token)
    with pytest.raises(AlreadyAcquired, match="handed over"):
        adopted.acquire(blocking=False)
    assert_values(masters5, key, taker.token)  # the refusal sent nothing
    adopted.release()
    assert adopted.acquire(blocking=False)  # a fresh token of its own
    assert adopted.token != taker.token and not adopted.adopted
    adopted.release()


def test_close_leaves_an_adopted_lock_to_its_taker(engine, make_redlock, masters5, key):
    taker = make_redlock(urls(masters5)).lock(key, 10)
    assert taker.acquire(blocking=False)
    adopter = make_redlock(urls(masters5))
    adopter.lock(key, 10, token=taker.token).extend()
    adopter.close()
    assert_values(masters5, key, taker.token)
    taker.release()


def test_owner_label_is_stored_with_the_token_and_inspected(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    lock = rl.lock(key, 10, owner="host-a:4242")
    assert lock.acquire(blocking=False)
    assert lock.owner == "host-a:4242" and len(lock.token) == 40
    assert_values(masters5, key, f"{lock.token} host-a:4242")
    states = make_redlock(urls(masters5)).inspect(key)
    assert [state.owner for state in states] == ["host-a:4242"] * 5
    assert all(state.ours for state in rl.inspect(key))
    lock.extend()
    assert 9 < lock.check() <= 10
    # an adopter names the taker's owner label too (it is part of what the masters hold)
    adopted = make_redlock(urls(masters5)).lock(key, 10, token=lock.token, owner="host-a:4242")
    adopted.extend()
    adopted.release()
    assert_no_key(masters5, key)
    assert [state.owner for state in rl.inspect(key)] == [None] * 5


def test_long_unicode_owner_label_round_trips(engine, make_redlock, masters5, key):
    owner = "wörker-é" * 6 + "ab"  # 62 bytes in UTF-8: the most chunks inspect reads
    rl = make_redlock(urls(masters5))
    lock = rwlock(rl, key, 10, owner=owner).write()
    assert lock.acquire(blocking=False)
    assert [state.owner for state in rl.inspect(key)] == [owner] * 5
    lock.release()


def test_owner_label_on_every_kind(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    permit = rl.semaphore(key, 2, 10, owner="sem:1").acquire(blocking=False)
    assert permit is not None
    permit_key = f"hiredlock:permit:{permit.index}:{{{key}}}"
    assert values(masters5, permit_key)[0].endswith(b" sem:1")
    reader = rwlock(rl, key, 10, owner="reader:1").read()
    assert reader.acquire(blocking=False)
    assert 9 < reader.check() <= 10
    fair = rl.lock(key, 10, fair=True, owner="fair:1")
    assert fair.acquire(blocking=False)
    assert [state.owner for state in rl.inspect(key)] == ["fair:1"] * 5
    for lock in (permit, reader, fair):
        lock.release()


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"token": 12}, TypeError, "token must be a str"),
        ({"token": "abc"}, ValueError, "token must be 40 lowercase hex"),
        ({"token": OTHER_TOKEN.upper()}, ValueError, "token must be 40 lowercase hex"),
        ({"token": OTHER_TOKEN, "fencing": True}, ValueError, "fencing cannot be used with token"),
        ({"token": OTHER_TOKEN, "auto_renew": True}, ValueError, "auto_renew cannot be used"),
        ({"owner": 7}, TypeError, "owner must be a str"),
        ({"owner": ""}, ValueError, "owner must not be empty"),
        ({"owner": "a\nb"}, ValueError, "owner must not contain control characters"),
        ({"owner": "x" * 65}, ValueError, "owner must be at most 64 bytes"),
    ],
)
def test_token_and_owner_are_checked_before_any_io(
    engine, make_redlock, masters5, key, options, error, message
):
    rl = make_redlock(urls(masters5))
    with pytest.raises(error, match=message):
        rl.lock(key, 10, **options)
    assert all(master.admin().dbsize() == 0 for master in masters5)


@pytest.mark.parametrize("maker", ["rlock", "semaphore", "rwlock"])
def test_kinds_without_hand_over_refuse_a_token(engine, make_redlock, masters5, key, maker):
    rl = make_redlock(urls(masters5))
    with pytest.raises(TypeError, match="unexpected keyword argument 'token'"):
        if maker == "rwlock":
            rwlock(rl, key, 10, token=OTHER_TOKEN)
        elif maker == "semaphore":
            rl.semaphore(key, 2, 10, token=OTHER_TOKEN)
        else:
            rl.rlock(key, 10, token=OTHER_TOKEN)
