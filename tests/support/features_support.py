"""Helpers for the tests of the lock kinds and the API (auto_renew, rlock, fencing, inspect, ...).

* `script_calls(servers)`: EVALSHA + EVAL calls per master, from INFO commandstats.  The lock's
  renewal (EXTEND), release and inspect scripts are all sent as EVALSHA (EVAL after NOSCRIPT), so an
  unchanged sum over a window proves that nothing of ours ran a script on that master meanwhile.
* `LeakCheck` (fixture `leakcheck`): the baseline of threads and library connections taken when a
  test starts, and `close_and_check(...)`, which closes Redlocks and then asserts that no watchdog
  or on_lost thread, no library connection and no lock key is left (fence counters may stay: they
  are meant to persist).
* `fence_worker`: the body of a fencing process (multiprocessing, spawn context).
"""

from __future__ import annotations

import threading
import time

import pytest
from servers import ADMIN_NAME
from support import EVENTUAL, EXTRA_SLACK, wait_until

WATCHDOG_PREFIX = "hiredlock-watchdog-"
ON_LOST_PREFIX = "hiredlock-on-lost-"  # the thread that runs on_lost after a failed renewal
FENCE_PREFIX = b"hiredlock:fence:"

# Added to every upper time bound of these tests (loaded 2-core machine, two engines).
SLACK = 0.25 + EXTRA_SLACK

# Per-master timeout for the tests whose subject is not the default timeout (5% of the ttl, at
# most 50 ms): a first round, which also connects, must not time out on a loaded machine.
MT = 0.15


def script_calls(servers) -> dict[int, int]:
    """{port: calls of EVALSHA + EVAL} on each (running) server."""
    out = {}
    for s in servers:
        stats = s.admin().info("commandstats")
        out[s.port] = sum(
            int(stats.get(name, {}).get("calls", 0)) for name in ("cmdstat_evalsha", "cmdstat_eval")
        )
    return out


def lib_addrs(servers) -> dict[int, set]:
    """{port: addrs of every client that is not our admin connection} (the library's)."""
    return {
        s.port: {c["addr"] for c in s.admin().client_list() if c.get("name") != ADMIN_NAME}
        for s in servers
    }


def watchdog_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(WATCHDOG_PREFIX)]


def on_lost_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(ON_LOST_PREFIX)]


def all_keys(server) -> list[bytes]:
    return list(server.admin().scan_iter(count=1000))


def lock_keys(server) -> list[bytes]:
    """Every key on the server except the (persistent, by design) fence counters."""
    return [k for k in all_keys(server) if not k.startswith(FENCE_PREFIX)]


def pttls(servers, key) -> list[int]:
    return [s.admin().pttl(key) for s in servers]


def wait_key_gone(servers, key, timeout, what="") -> float:
    """Polls until no server holds `key`; returns time.monotonic() when first seen gone."""
    deadline = time.monotonic() + timeout
    while True:
        if all(s.admin().exists(key) == 0 for s in servers):
            return time.monotonic()
        if time.monotonic() > deadline:
            raise AssertionError(
                f"key {key!r} still present after {timeout}s {what}: {pttls(servers, key)}"
            )
        time.sleep(0.005)


class LeakCheck:
    """Baseline at test start; close_and_check() closes Redlocks and asserts nothing is left."""

    def __init__(self, servers):
        self.servers = list(servers)
        self.threads_before = set(threading.enumerate())
        assert not watchdog_threads(), (
            f"a watchdog thread is already running when the test starts: {watchdog_threads()}"
        )
        self.before = lib_addrs(self.servers)

    def close_and_check(self, *redlocks, servers=None, what="close()"):
        """Closes the Redlocks; then, on `servers` (default: the baseline's servers, which must
        be running): no watchdog thread (close() joins it: checked at once, no polling), the
        library's connections back to the baseline, no lock key (SCAN; fence counters allowed)."""
        for rl in redlocks:
            rl.close()
        left = watchdog_threads() + on_lost_threads()
        assert not left, f"watchdog or on_lost thread(s) alive right after {what}: {left}"
        wait_until(
            lambda: set(threading.enumerate()) <= self.threads_before,
            5,
            f"no thread added by the test is left after {what}: "
            f"{set(threading.enumerate()) - self.threads_before}",
        )
        servers = self.servers if servers is None else list(servers)
        ports = {s.port for s in servers}

        def conns_back():
            now = lib_addrs(servers)
            return all(now[p] <= self.before.get(p, set()) for p in ports)

        try:
            wait_until(conns_back, 5, f"library connections closed after {what}")
        except AssertionError:
            raise AssertionError(
                f"library connections left after {what}: before={self.before} "
                f"now={lib_addrs(servers)}"
            ) from None
        # Commands sent but not waited for (masters beyond the quorum) may still be in flight.
        try:
            wait_until(lambda: not any(lock_keys(s) for s in servers), EVENTUAL, "no lock key left")
        except AssertionError:
            leftover = {s.port: lock_keys(s) for s in servers}
            raise AssertionError(f"lock keys left after {what}: {leftover}") from None


@pytest.fixture(name="leakcheck")
def leakcheck_fixture(masters5):
    """Import `leakcheck_fixture` into a test module to use the `leakcheck` fixture."""
    return LeakCheck(masters5)


# -- fencing worker (runs in a spawned process) -------------------------------------------------


def fence_worker(engine, master_urls, judge_url, name, iters, ttl, master_timeout, ready, go, out):
    """Acquires `name` with fencing `iters` times; under the lock RPUSHes the fence to the judge's
    list "fences"; puts {"fences": [...], "late": [...], "lost": n, "errors": [...]} on `out`.
    "late": fences whose holder found its validity over right after the RPUSH."""
    import redis

    import hiredlock

    res = {"fences": [], "late": [], "lost": 0, "errors": [], "not_acquired": 0}
    try:
        judge = redis.Redis.from_url(judge_url, socket_timeout=10)
        judge.ping()
        rl = hiredlock.Redlock(
            master_urls,
            backend=engine,
            retry_delay=0.005,
            retry_count=50,
            master_timeout=master_timeout,
        )
        ready.set()
        if not go.wait(60):
            raise RuntimeError("no go signal")
        try:
            for _ in range(iters):
                lock = rl.lock(name, ttl, fencing=True)
                try:
                    ok = lock.acquire(timeout=30)
                except hiredlock.LockNotAcquired as exc:
                    res["not_acquired"] += 1
                    res["errors"].append(repr(exc)[:300])
                    continue
                if not ok:
                    res["not_acquired"] += 1
                    continue
                fence = lock.fence
                res["fences"].append(fence)
                judge.rpush("fences", fence)
                if lock.validity <= 0:
                    # Descheduled past the validity (a loaded machine): the RPUSH may not have
                    # happened while we held the lock, so it proves nothing about the order.
                    res["late"].append(fence)
                try:
                    lock.release()
                except hiredlock.LockLost as exc:
                    if fence not in res["late"]:
                        res["lost"] += 1
                        res["errors"].append(repr(exc)[:300])
        finally:
            rl.close()
    except BaseException as exc:  # reported to the test
        res["errors"].append("worker crashed: " + repr(exc)[:500])
    out.put(res)
