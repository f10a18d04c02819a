"""Acceptance 9: error replies are per-master ERROR votes carrying the server's text (with its
code); they are never mistaken for a success.  WRONGTYPE, NOAUTH/WRONGPASS, READONLY."""

from __future__ import annotations

import pytest
from support import assert_no_key, assert_values, attempt, urls, vote_for

from hiredlock import LockLost, LockNotAcquired, Outcome, QuorumUnreachable

HASH = {b"field": b"value"}


def make_hash(servers, key):
    for s in servers:
        s.admin().hset(key, mapping=HASH)


def assert_hash_intact(servers, key):
    for s in servers:
        assert s.admin().type(key) == b"hash"
        assert s.admin().hgetall(key) == HASH


@pytest.mark.parametrize("n_hash", [3, 4, 5])
def test_hash_on_majority_is_never_a_success(engine, make_redlock, masters5, key, n_hash):
    """A key holding a hash on a majority.  Note: SET NX does not type-check (it answers nil when
    the key exists, whatever its type), so the acquire round itself sees no WRONGTYPE: those
    masters refuse (TAKEN).  The unlock script after the failed attempt does hit WRONGTYPE (GET on
    a hash); either way the attempt must fail and leave the hashes alone."""
    bad, good = masters5[:n_hash], masters5[n_hash:]
    make_hash(bad, key)
    rl = make_redlock(urls(masters5), retry_count=2, retry_delay=0.01)

    lock = rl.lock(key, 5)
    r = attempt(lock, blocking=False)
    assert r is not True
    assert not lock.held
    if isinstance(r, LockNotAcquired):
        for m in bad:
            v = vote_for(r.votes, m)
            assert v.outcome in (Outcome.TAKEN, Outcome.ERROR, Outcome.SKIPPED), r.votes
            if v.outcome == Outcome.ERROR:
                assert v.detail and v.detail.startswith("WRONGTYPE"), v
    assert_no_key(good, key)

    r = attempt(rl.lock(key, 5), timeout=0.2)
    assert r is not True
    assert_hash_intact(bad, key)
    assert_no_key(good, key)


def test_wrongtype_on_minority(engine, make_redlock, masters5, key):
    """2 of 5 hold a hash: acquire works on the other 3; release's script hits WRONGTYPE on the 2
    (GET on a hash) but 3 released: no LockLost; the hashes are untouched."""
    bad, good = masters5[:2], masters5[2:]
    make_hash(bad, key)
    rl = make_redlock(urls(masters5))
    lock = rl.lock(key, 5)
    assert lock.acquire(blocking=False) is True
    assert_values(good, key, lock.token)
    lock.extend(10)
    lock.release()
    assert_hash_intact(bad, key)
    assert_no_key(good, key)


def test_wrongtype_on_release_majority_is_lock_lost(engine, make_redlock, masters5, key):
    """Our keys replaced by hashes on 3 of 5 after acquire: release raises LockLost with ERROR
    votes (WRONGTYPE) for those masters, and leaves the hashes alone."""
    rl = make_redlock(urls(masters5))
    lock = rl.lock(key, 5)
    assert lock.acquire(blocking=False)
    for m in masters5[:3]:
        m.admin().delete(key)
    make_hash(masters5[:3], key)
    with pytest.raises(LockLost) as ei:
        lock.release()
    for m in masters5[:3]:
        v = vote_for(ei.value.votes, m)
        assert v.outcome == Outcome.ERROR and v.detail.startswith("WRONGTYPE"), ei.value.votes
    assert_hash_intact(masters5[:3], key)
    assert_no_key(masters5[3:], key)


def test_wrongtype_on_extend_majority_is_lock_lost(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    lock = rl.lock(key, 5)
    assert lock.acquire(blocking=False)
    tok = lock.token.encode()
    for m in masters5[:3]:
        m.admin().delete(key)
    make_hash(masters5[:3], key)
    with pytest.raises(LockLost) as ei:
        lock.extend(20)
    for m in masters5[:3]:
        v = vote_for(ei.value.votes, m)
        # masters beyond the decision may be SKIPPED; any that answered said WRONGTYPE
        assert v.outcome in (Outcome.ERROR, Outcome.SKIPPED), ei.value.votes
        if v.outcome == Outcome.ERROR:
            assert v.detail.startswith("WRONGTYPE"), v
    assert sum(vote_for(ei.value.votes, m).outcome == Outcome.ERROR for m in masters5[:3]) >= 1
    assert "WRONGTYPE" in str(ei.value)
    assert not lock.held
    assert_hash_intact(masters5[:3], key)
    assert_values(masters5[3:], key, tok)


@pytest.mark.parametrize("n_oom", [1, 2, 3])
def test_oom_error_reply_on_acquire(engine, make_redlock, redis_factory, key, n_oom):
    """Masters that refuse writes (maxmemory 1, noeviction) answer -OOM to SET: an ERROR vote with
    the server's text; a majority of them makes the quorum unreachable."""
    servers = redis_factory(3)
    for s in servers[:n_oom]:
        s.admin().config_set("maxmemory-policy", "noeviction")
        s.admin().config_set("maxmemory", "1")
    rl = make_redlock(urls(servers), retry_count=1)
    lock = rl.lock(key, 5)
    if n_oom < 2:
        assert lock.acquire(blocking=False) is True
        lock.release()
        assert_no_key(servers[n_oom:], key)
        return
    with pytest.raises(QuorumUnreachable) as ei:
        lock.acquire(blocking=False)
    for s in servers[:n_oom]:
        v = vote_for(ei.value.votes, s)
        assert v.outcome in (Outcome.ERROR, Outcome.SKIPPED), ei.value.votes
        if v.outcome == Outcome.ERROR:
            assert v.detail.startswith("OOM"), v
    assert sum(vote_for(ei.value.votes, s).outcome == Outcome.ERROR for s in servers[:n_oom]) >= 2
    for s in servers:
        s.admin().config_set("maxmemory", "0")
    assert_no_key(servers, key)


# -- authentication --------------------------------------------------------------------------


@pytest.fixture
def secured(redis_factory):
    (srv,) = redis_factory(1)
    srv.set_password("s3cret-pw")
    return srv


def test_noauth(engine, make_redlock, secured, key):
    rl = make_redlock([secured.url], retry_count=1)
    with pytest.raises(QuorumUnreachable) as ei:
        rl.lock(key, 5).acquire(blocking=False)
    (v,) = ei.value.votes
    assert v.outcome == Outcome.ERROR, v
    assert v.detail and "NOAUTH" in v.detail, v
    assert secured.admin().exists(key) == 0
    # the same through the blocking path
    with pytest.raises(QuorumUnreachable):
        rl.lock(key, 5).acquire()


@pytest.mark.parametrize("how", ["url", "url-default-user", "dict", "client"])
def test_correct_password_works(engine, make_redlock, secured, key, how):
    if how == "url":
        master = f"redis://:s3cret-pw@127.0.0.1:{secured.port}/0"
    elif how == "url-default-user":
        master = f"redis://default:s3cret-pw@127.0.0.1:{secured.port}/0"
    elif how == "dict":
        master = {"host": "127.0.0.1", "port": secured.port, "password": "s3cret-pw"}
    else:
        master = secured.client(password="s3cret-pw")
    rl = make_redlock([master])
    lock = rl.lock(key, 5)
    assert lock.acquire(blocking=False)
    assert secured.admin().get(key) == lock.token.encode()
    lock.extend()
    lock.release()
    assert secured.admin().exists(key) == 0
    # the password never shows in the master names, votes or errors
    assert all("s3cret-pw" not in str(spec) for spec in rl.masters)
    assert "s3cret-pw" not in repr(rl)
    assert "s3cret-pw" not in repr(lock)


def test_wrong_password(engine, make_redlock, secured, key):
    rl = make_redlock([f"redis://:wrong-pw@127.0.0.1:{secured.port}/0"], retry_count=1)
    with pytest.raises(QuorumUnreachable) as ei:
        rl.lock(key, 5).acquire(blocking=False)
    (v,) = ei.value.votes
    assert v.outcome in (Outcome.ERROR, Outcome.CONN_ERROR), v
    assert "wrong-pw" not in str(ei.value) and "wrong-pw" not in str(v.master)
    assert secured.admin().exists(key) == 0


def test_password_not_leaked_in_votes(engine, make_redlock, redis_factory, key):
    """Failure messages name the master without its password."""
    (srv,) = redis_factory(1)
    srv.set_password("top-secret-1")
    srv.kill()
    rl = make_redlock([f"redis://:top-secret-1@127.0.0.1:{srv.port}/0"], retry_count=1)
    with pytest.raises(QuorumUnreachable) as ei:
        rl.lock(key, 5).acquire(blocking=False)
    assert "top-secret-1" not in str(ei.value)
    assert all(
        "top-secret-1" not in v.master and "top-secret-1" not in (v.detail or "")
        for v in ei.value.votes
    )


# -- READONLY ----------------------------------------------------------------------------------


def test_readonly_replica(engine, make_redlock, redis_factory, masters5, key):
    """A master that became a read-only replica answers -READONLY: an ERROR vote; with 2 replicas
    of 5 the lock still works on the other 3."""
    a, b = redis_factory(2)
    for r in (a, b):
        # replica of a port where nothing serves: read-only regardless of the link state
        r.admin().execute_command("REPLICAOF", "127.0.0.1", "1")
    masters = [a, b, *masters5[:3]]
    rl = make_redlock(urls(masters))
    lock = rl.lock(key, 5)
    assert lock.acquire(blocking=False) is True
    lock.release()
    assert_no_key(masters5[:3], key)

    rl1 = make_redlock([a.url], retry_count=1)
    with pytest.raises(QuorumUnreachable) as ei:
        rl1.lock(key, 5).acquire(blocking=False)
    (v,) = ei.value.votes
    assert v.outcome == Outcome.ERROR and v.detail.startswith("READONLY"), v
