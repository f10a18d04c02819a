"""After close() nothing of the client is left: no watchdog thread, no library connection on any
master (CLIENT LIST, our admin connection excluded), no thread added, no lock key (fence counters
persist by design).

Most tests of the lock kinds end with the same check (features_support.LeakCheck.close_and_check);
here a Redlock is closed while it still holds locks of every kind, from several threads, after
failures, as a context manager, and shared by threads.  What close() does with work still in
flight: tests/api/test_close_in_flight.py.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import threading

import pytest
from aio_support import run_async  # noqa: F401  (the fixture)
from features_support import (  # noqa: F401  (the leakcheck fixture)
    FENCE_PREFIX,
    MT,
    WATCHDOG_PREFIX,
    all_keys,
    leakcheck_fixture,
    lib_addrs,
    watchdog_threads,
)
from support import assert_no_key, assert_values, braced, set_foreign, urls, wait_until

from hiredlock import HiredlockError, LockLost, NotHeld, Redlock
from hiredlock._core.session import HELD_PRUNED_PAST
from hiredlock.aio import AsyncRedlock


def test_close_while_holding_everything(engine, masters5, key, leakcheck):
    rl = Redlock(urls(masters5), backend=engine, master_timeout=MT)
    n_threads = 3
    held = [threading.Event() for _ in range(n_threads)]
    go = threading.Event()
    locks = [None] * n_threads
    errors = []

    def holder(i):
        try:
            lk = rl.lock(f"{key}:t{i}", 1, auto_renew=True)
            assert lk.acquire(timeout=5)
            locks[i] = lk
            held[i].set()
            assert go.wait(30)
            # close() released it: the holder's own release, second, says nothing (one of the
            # two releases wins), a third is refused, and no renewal revived it.
            lk.release()
            try:
                lk.release()
            except NotHeld:
                pass
            else:
                errors.append(f"thread {i}: a second release() did not raise NotHeld")
        except BaseException as exc:
            errors.append(f"thread {i}: {exc!r}")
            held[i].set()

    ts = [threading.Thread(target=holder, args=(i,)) for i in range(n_threads)]
    for t in ts:
        t.start()
    for e in held:
        assert e.wait(10)
    assert not errors, errors
    rlock = rl.rlock(key + ":r", 10, auto_renew=True)
    assert rlock.acquire() and rlock.acquire()
    fenced = rl.lock(key + ":f", 10, fencing=True)
    assert fenced.acquire(blocking=False) and fenced.fence >= 1

    @rl.synchronized(key + ":s", 10)
    def sync():
        return rl.inspect(key + ":t0")

    assert_values(masters5, f"{key}:t0", locks[0].token)  # masters beyond the quorum follow
    assert all(s.ours for s in sync())
    mine = [t for t in watchdog_threads() if t.name == f"{WATCHDOG_PREFIX}{hex(id(rl))}"]
    assert len(mine) == 1, watchdog_threads()  # one watchdog for all the Redlock's locks
    during = lib_addrs(masters5)
    assert any(during[p] - leakcheck.before[p] for p in during), "no library connection seen?"

    rl.close()
    assert not mine[0].is_alive(), "close() returned before the watchdog thread ended"
    for name in [f"{key}:t{i}" for i in range(n_threads)] + [key + ":r", key + ":f"]:
        assert_no_key(masters5, name, "after close() (close releases held locks)")
    # The fence counter stays (fences must keep growing after a restart of the client).
    assert all(m.admin().get(FENCE_PREFIX + braced(key + ":f")) for m in masters5)
    go.set()
    for t in ts:
        t.join(10)
    assert not errors, errors
    for lk in locks:
        assert not lk.held and not lk.lost.is_set()
    for m in masters5:
        m.admin().delete(FENCE_PREFIX + braced(key + ":f"))
    leakcheck.close_and_check(rl, what="close() while holding locks")
    for m in masters5:
        assert all_keys(m) == []
    rl.close()  # idempotent


def test_context_manager_close_with_auto_renew(engine, masters5, key, leakcheck):
    with Redlock(urls(masters5), backend=engine, master_timeout=MT) as rl:
        lock = rl.lock(key, 5, auto_renew=True)
        assert lock.acquire(blocking=False)
        assert watchdog_threads()
    assert not watchdog_threads()
    assert_no_key(masters5, key)
    leakcheck.close_and_check(what="leaving `with Redlock(...)`")


def test_lock_after_close_starts_no_watchdog(engine, masters5, key, leakcheck):
    rl = Redlock(urls(masters5), backend=engine, master_timeout=MT)
    rl.close()
    lock = rl.lock(key, 1, auto_renew=True)  # no I/O: allowed
    with contextlib.suppress(HiredlockError):  # refusing to acquire on a closed Redlock is fine
        lock.acquire(blocking=False)
    assert not watchdog_threads(), "a watchdog thread started after close()"
    leakcheck.close_and_check(what="acquire after close()")


# -- connections, threads and keys after close() ---------------------------------------------------


def foreign_addrs(servers):
    return {s.port: {c["addr"] for c in s.foreign_clients()} for s in servers}


def assert_back_to(servers, before, threads_before, what):
    def conns_gone():
        now = foreign_addrs(servers)
        return all(now[p] <= before[p] for p in before)

    wait_until(
        conns_gone,
        5,
        f"connections closed after {what}: before={before} now={foreign_addrs(servers)}",
    )
    wait_until(
        lambda: set(threading.enumerate()) <= threads_before,
        5,
        f"threads gone after {what}: {set(threading.enumerate()) - threads_before}",
    )


def exercise(rl, key, masters):
    lk = rl.lock(key, 5)
    assert lk.acquire(blocking=False)
    lk.extend()
    lk.release()
    with rl.lock(key + ":cm", 5):
        pass
    set_foreign(masters[:3], key + ":taken")
    assert rl.lock(key + ":taken", 5).acquire(blocking=False) is False
    lost = rl.lock(key + ":lost", 5)
    assert lost.acquire(blocking=False)
    assert_values(masters, key + ":lost", lost.token)  # (no late SET re-creates it)
    for m in masters:
        m.admin().delete(key + ":lost")
    with pytest.raises(LockLost):
        lost.release()
    for m in masters:
        m.admin().delete(key + ":taken")


def test_close_leaves_nothing(engine, masters5, key):
    threads_before = set(threading.enumerate())
    before = foreign_addrs(masters5)
    rl = Redlock(urls(masters5), backend=engine)
    exercise(rl, key, masters5)
    during = foreign_addrs(masters5)
    assert any(during[p] - before[p] for p in before), "no connection seen while in use?"
    rl.close()
    assert_back_to(masters5, before, threads_before, "close()")
    rl.close()  # idempotent
    for m in masters5:
        assert m.admin().dbsize() == 0, m.admin().keys()


def test_context_manager_closes(engine, masters5, key):
    threads_before = set(threading.enumerate())
    before = foreign_addrs(masters5)
    with Redlock(urls(masters5), backend=engine) as rl:
        exercise(rl, key, masters5)
    assert_back_to(masters5, before, threads_before, "with Redlock(...)")
    for m in masters5:
        assert m.admin().dbsize() == 0


def test_threads_share_a_redlock_then_close(engine, masters5, key):
    """4 threads use one Redlock at once (the API layer pools engines); all succeed, and close()
    closes every pooled connection."""
    threads_before = set(threading.enumerate())
    before = foreign_addrs(masters5)
    rl = Redlock(urls(masters5), backend=engine)
    errors = []
    start = threading.Barrier(4)

    def work(t):
        try:
            start.wait(10)
            for i in range(50):
                lk = rl.lock(f"{key}:{t}:{i % 5}", 5)
                assert lk.acquire(blocking=False), (t, i)
                lk.release()
        except BaseException as exc:  # reported below
            errors.append(repr(exc))

    ts = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert not errors, errors
    rl.close()
    assert_back_to(masters5, before, threads_before, "close() after threaded use")
    for m in masters5:
        assert m.admin().dbsize() == 0


def test_close_after_failures(engine, masters5, key):
    """Connections to masters that failed (killed, then stopped) are closed too."""
    threads_before = set(threading.enumerate())
    live = masters5[2:]
    before = foreign_addrs(live)
    rl = Redlock(urls(masters5), backend=engine, master_timeout=0.03, retry_count=1)
    lk = rl.lock(key, 5)
    assert lk.acquire(blocking=False)
    lk.release()
    masters5[0].kill()
    masters5[1].stop()
    lk = rl.lock(key, 5)
    assert lk.acquire(blocking=False)
    lk.release()
    rl.close()
    assert_back_to(live, before, threads_before, "close() with a dead and a frozen master")
    masters5[1].cont()
    for m in live:
        assert m.admin().exists(key) == 0


def test_a_held_lock_its_caller_dropped_leaves_the_clients_registry(
    engine, masters5, key, monkeypatch
):
    """A lock object dropped while held is neither kept alive nor released by close() (its keys
    expire with their ttl): its dead weak reference leaves the registry of held locks when the
    registry is read, with nothing raised meanwhile."""
    unraisable: list = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    servers = masters5[:3]
    rl = Redlock(urls(servers), backend=engine, master_timeout=MT)
    kept = rl.lock(key + ":kept", 30)
    dropped = rl.lock(key, 30)
    assert kept.acquire(blocking=False) and dropped.acquire(blocking=False)
    assert len(rl.session.held) == 2
    del dropped
    gc.collect()
    assert [lock.key for lock in rl.session.held_locks()] == [kept.key]
    assert len(rl.session.held) == 1
    rl.close()
    assert_no_key(servers, key + ":kept")
    assert all(server.admin().get(key) is not None for server in servers)  # (until its ttl)
    assert unraisable == []
    for server in servers:
        server.admin().delete(key)


# Locks dropped while held, one after another, in the tests below: 3 times the registry's
# pruning bound
DROPPED = 3 * HELD_PRUNED_PAST


def assert_registry_pruned(session, kept) -> None:
    """After the drops: reading the registry leaves the one live lock in it."""
    assert [lock.key for lock in session.held_locks()] == [kept.key]
    assert len(session.held) == 1


def delete_dropped_keys(servers, key) -> None:
    for server in servers:
        server.admin().delete(*[f"{key}:{i}" for i in range(DROPPED)])


def test_locks_dropped_while_held_do_not_grow_the_registry(engine, masters5, key):
    """Lock objects dropped while held, one after another, leave dead references that the
    registry takes out as it grows: it stays within its pruning bound, however many were
    dropped, and the live ones stay in it."""
    servers = masters5[:3]
    rl = Redlock(urls(servers), backend=engine, master_timeout=MT)
    kept = rl.lock(key + ":kept", 30)
    assert kept.acquire(blocking=False)
    try:
        for i in range(DROPPED):
            lock = rl.lock(f"{key}:{i}", 30)
            assert lock.acquire(blocking=False)
            del lock
            assert len(rl.session.held) <= HELD_PRUNED_PAST + 1
        assert_registry_pruned(rl.session, kept)
    finally:
        rl.close()
        delete_dropped_keys(servers, key)
    assert_no_key(servers, key + ":kept")


def test_async_locks_dropped_while_held_do_not_grow_the_registry(
    engine,
    masters5,
    key,
    run_async,  # noqa: F811
):
    """The same with hiredlock.aio's AsyncLock (the registry is the session's, for both APIs)."""
    servers = masters5[:3]

    async def main() -> None:
        rl = AsyncRedlock(urls(servers), backend=engine, master_timeout=MT)
        kept = rl.lock(key + ":kept", 30)
        assert await kept.acquire(blocking=False)
        try:
            for i in range(DROPPED):
                lock = rl.lock(f"{key}:{i}", 30)
                assert await lock.acquire(blocking=False)
                del lock
                assert len(rl.session.held) <= HELD_PRUNED_PAST + 1
            assert_registry_pruned(rl.session, kept)
        finally:
            await rl.aclose()

    try:
        run_async(main())
    finally:
        delete_dropped_keys(servers, key)
    assert_no_key(servers, key + ":kept")


def test_an_async_held_lock_its_caller_dropped_leaves_the_clients_registry(
    engine,
    masters5,
    key,
    monkeypatch,
    run_async,  # noqa: F811
):
    """The same with hiredlock.aio: the dropped AsyncLock leaves the registry when it is read,
    and aclose() releases only the other."""
    unraisable: list = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    servers = masters5[:3]

    async def main() -> None:
        rl = AsyncRedlock(urls(servers), backend=engine, master_timeout=MT)
        kept = rl.lock(key + ":kept", 30)
        dropped = rl.lock(key, 30)
        assert await kept.acquire(blocking=False) and await dropped.acquire(blocking=False)
        assert len(rl.session.held) == 2
        del dropped
        gc.collect()
        assert [lock.key for lock in rl.session.held_locks()] == [kept.key]
        assert len(rl.session.held) == 1
        await rl.aclose()

    run_async(main())
    assert_no_key(servers, key + ":kept")
    assert all(server.admin().get(key) is not None for server in servers)  # (until its ttl)
    assert unraisable == []
    for server in servers:
        server.admin().delete(key)
