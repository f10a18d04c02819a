"""The engine pool gives connections back after a burst of threads (a forked child closing the
sockets it inherited: tests/api/test_fork.py)."""

from __future__ import annotations

import os
import threading
import time

from features_support import MT, lib_addrs
from support import urls

from hiredlock._engines import pool as _pool


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _new_connections(servers, before: dict) -> dict:
    """Per master, how many client connections are open now that were not open in `before`
    (what other tests' clients left on the shared masters is not ours to count)."""
    return {port: len(addrs - before[port]) for port, addrs in lib_addrs(servers).items()}


def _burst(rl, name: str, threads: int) -> None:
    """`threads` threads each take and release a lock at the same moment (each needs an engine)."""
    barrier = threading.Barrier(threads)
    errors: list = []

    def work(index: int) -> None:
        try:
            lock = rl.lock(f"{name}:{index}", 5)
            barrier.wait(10)
            assert lock.acquire(timeout=10)
            barrier.wait(10)  # every thread holds its engine's connections at once here
            lock.release()
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(30)
    assert not errors, errors


def test_a_burst_of_threads_leaves_at_most_max_idle_connections(
    engine, make_redlock, masters5, key
):
    fds_before = _open_fds()
    before = lib_addrs(masters5)
    rl = make_redlock(urls(masters5), master_timeout=MT)
    _burst(rl, key, 20)
    grown = _open_fds() - fds_before
    assert grown <= _pool.MAX_IDLE * len(masters5) + 2, f"{grown} fds kept after the burst"
    per_master = _new_connections(masters5, before)
    assert all(count <= _pool.MAX_IDLE for count in per_master.values()), per_master


def test_idle_engines_beyond_one_are_closed_after_their_lifetime(
    engine, make_redlock, masters5, key, monkeypatch
):
    monkeypatch.setattr(_pool, "IDLE_LIFETIME_S", 0.2)
    before = lib_addrs(masters5[:3])
    rl = make_redlock(urls(masters5[:3]), master_timeout=MT)
    _burst(rl, key, 8)
    assert max(_new_connections(masters5[:3], before).values()) > 1
    lock = rl.lock(key, 5)
    deadline = time.monotonic() + 10
    # One thread keeps calling: the idle engines it never needs go, down to the one it uses.
    while time.monotonic() < deadline:
        assert lock.acquire(blocking=False)
        lock.release()
        if all(count == 1 for count in _new_connections(masters5[:3], before).values()):
            break
        time.sleep(0.05)
    counts = _new_connections(masters5[:3], before)
    assert all(count == 1 for count in counts.values()), counts
