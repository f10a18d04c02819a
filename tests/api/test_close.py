"""Feature 7: after close() no watchdog thread, no library connection and no lock key is left
(fence counters persist by design).  Every other test_features_* test ends with the same check
(LeakCheck.close_and_check); this module closes a Redlock while it still holds locks of every
kind, from several threads."""

from __future__ import annotations

import contextlib
import threading

from features_support import (  # noqa: F401  (the leakcheck fixture)
    FENCE_PREFIX,
    MT,
    WATCHDOG_PREFIX,
    all_keys,
    leakcheck_fixture,
    lib_addrs,
    watchdog_threads,
)
from support import assert_no_key, assert_values, urls

from hiredlock import HiredlockError, NotHeld, Redlock


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
    assert all(m.admin().get(FENCE_PREFIX + (key + ":f").encode()) for m in masters5)
    go.set()
    for t in ts:
        t.join(10)
    assert not errors, errors
    for lk in locks:
        assert not lk.held and not lk.lost.is_set()
    for m in masters5:
        m.admin().delete(FENCE_PREFIX + (key + ":f").encode())
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
