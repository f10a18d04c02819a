"""Acceptance 10: after close() no connection of ours remains on any master (CLIENT LIST, our admin
connection excluded), no thread was added, no key was left."""

from __future__ import annotations

import threading

import pytest
from support import set_foreign, urls, wait_until

from hiredlock import LockLost, Redlock


def lib_addrs(servers):
    return {s.port: {c["addr"] for c in s.foreign_clients()} for s in servers}


def assert_back_to(servers, before, threads_before, what):
    def conns_gone():
        now = lib_addrs(servers)
        return all(now[p] <= before[p] for p in before)

    wait_until(
        conns_gone, 5, f"connections closed after {what}: before={before} now={lib_addrs(servers)}"
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
    for m in masters:
        m.admin().delete(key + ":lost")
    with pytest.raises(LockLost):
        lost.release()
    for m in masters:
        m.admin().delete(key + ":taken")


def test_close_leaves_nothing(engine, masters5, key):
    threads_before = set(threading.enumerate())
    before = lib_addrs(masters5)
    rl = Redlock(urls(masters5), backend=engine)
    exercise(rl, key, masters5)
    during = lib_addrs(masters5)
    assert any(during[p] - before[p] for p in before), "no connection seen while in use?"
    rl.close()
    assert_back_to(masters5, before, threads_before, "close()")
    rl.close()  # idempotent
    for m in masters5:
        assert m.admin().dbsize() == 0, m.admin().keys()


def test_context_manager_closes(engine, masters5, key):
    threads_before = set(threading.enumerate())
    before = lib_addrs(masters5)
    with Redlock(urls(masters5), backend=engine) as rl:
        exercise(rl, key, masters5)
    assert_back_to(masters5, before, threads_before, "with Redlock(...)")
    for m in masters5:
        assert m.admin().dbsize() == 0


def test_threads_share_a_redlock_then_close(engine, masters5, key):
    """4 threads use one Redlock at once (the API layer pools engines); all succeed, and close()
    closes every pooled connection."""
    threads_before = set(threading.enumerate())
    before = lib_addrs(masters5)
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
    before = lib_addrs(live)
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
