"""A Redis Cluster that changes under contended locks: a slot migrated step by step (ASK while it
moves, MOVED after) and a primary killed and replaced by its replica. Threads of several clients
contend on names of one slot; an occupancy oracle in the test process counts two holders of one
name at once (a violation). Both engines, both APIs (support/apis.py: on the async API, each
thread's calls run as tasks of one event loop)."""

from __future__ import annotations

import random
import re
import socket
import threading
import time

import pytest
from apis import make_redlock_fixture, pytest_generate_tests  # noqa: F401  (both APIs)
from clusters import SlotMigration, fresh_cluster_fixture  # noqa: F401  (fixture)
from support import wait_until

from hiredlock import HiredlockError
from hiredlock._core.slots import key_slot
from hiredlock._engines import cluster as _cluster

PROGRESS_S = 60  # (how long a phase may take to show progress on a loaded machine)
TTL_S = 10  # the contenders' locks


class Contenders:
    """`threads` threads, each with a client of its own (made by `make_redlock`), taking one of
    `names` at a time (timeout 2 s, ttl 10 s) and releasing it; `inside` is the oracle."""

    def __init__(self, make_redlock, url: str, names: list[str], threads: int = 4) -> None:
        self.names = names
        self.inside = dict.fromkeys(names, 0)
        self.mutex = threading.Lock()
        self.violations = 0
        self.acquired = 0
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.clients = [make_redlock([url], retry_delay=0.02) for _ in range(threads)]
        self.threads = [
            threading.Thread(target=self._run, args=(client,), daemon=True)
            for client in self.clients
        ]
        for thread in self.threads:
            thread.start()

    def _run(self, client) -> None:
        rng = random.Random()
        while not self.stop.is_set():
            name = rng.choice(self.names)
            lock = client.lock(name, TTL_S)
            try:
                if not lock.acquire(timeout=2):
                    continue
            except HiredlockError as exc:
                self.errors.append(f"acquire: {exc}")
                continue
            with self.mutex:
                self.inside[name] += 1
                if self.inside[name] > 1:
                    self.violations += 1
                self.acquired += 1
            with self.mutex:
                self.inside[name] -= 1
            try:
                lock.release()
            except HiredlockError as exc:
                self.errors.append(f"release: {exc}")

    def progress(self, more: int, what: str) -> None:
        """Waits until `more` acquisitions more than now have been made."""
        target = self.acquired + more
        wait_until(lambda: self.acquired >= target, PROGRESS_S, what)

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(30)
        for client in self.clients:
            client.close()


class Monitor:
    """The commands a server ran while watched (MONITOR), read at the end."""

    def __init__(self, server) -> None:
        self._sock = socket.create_connection(("127.0.0.1", server.port), timeout=5)
        self._sock.sendall(b"MONITOR\r\n")
        assert self._sock.recv(5) == b"+OK\r\n"

    def close(self) -> bytes:
        """What it ran until now (read for at most a second: the commands keep coming)."""
        self._sock.settimeout(0.2)
        data = b""
        deadline = time.monotonic() + 1.0
        try:
            while time.monotonic() < deadline and (chunk := self._sock.recv(65536)):
                data += chunk
        except socket.timeout:
            pass
        self._sock.close()
        return data


def rejected_calls(server) -> int:
    """The commands the server refused (INFO commandstats): a cluster node counts there the
    commands it answered with a redirection."""
    stats = server.admin().info("commandstats")
    return sum(int(entry.get("rejected_calls", 0)) for entry in stats.values())


def names_in_one_slot(count: int) -> list[str]:
    return [f"{{migrating}}:{i}" for i in range(count)]


def test_a_slot_migrated_under_contention_keeps_one_holder(make_redlock, fresh_cluster):
    names = names_in_one_slot(6)
    slot = key_slot(names[0].encode())
    source = fresh_cluster.server_on(fresh_cluster.owners()[slot])
    target = next(s for s in fresh_cluster.primaries() if s is not source)
    migration = SlotMigration(fresh_cluster, slot, source, target)
    contenders = Contenders(make_redlock, fresh_cluster.url, names)
    try:
        contenders.progress(20, "acquisitions before the migration")
        watched_target = Monitor(target)
        migration.begin()  # a name not on the source now answers ASK there
        contenders.progress(20, "acquisitions while the slot is migrating")
        migration.move_keys()
        contenders.progress(10, "acquisitions with the keys moved")
        asked = watched_target.close()
        redirected = rejected_calls(source)
        migration.finish()  # the source answers MOVED from now on
        contenders.progress(20, "acquisitions after the migration")
        moved = rejected_calls(source) - redirected
    finally:
        contenders.close()
    assert contenders.violations == 0
    assert re.search(rb'"asking"', asked, re.I), "no ASK was followed (no ASKING on the target)"
    # (the source refuses a command of a slot it no longer has with MOVED: a rejected call)
    assert moved > 0, "no command was redirected by the old owner after the migration"
    assert source.admin().keys("*migrating*") == []
    assert [k for k in target.admin().keys("*migrating*")] == []  # (all released)


@pytest.mark.each_value_once
def test_a_killed_primary_is_replaced_by_its_replica(make_redlock, fresh_cluster, monkeypatch):
    """Locks go on after a primary's death once its replica is promoted: the slot map is asked
    again after the failures (the map's periodic refresh is put off here, so that only that can
    find the new primary). A lock held on the dead primary when it died may be lost with it
    (docs/production.md: Redis Cluster): the oracle is not asked to hold across the failover,
    only after it.

    A key may be left on the promoted replica, until its ttl, by what the kill cut short: a
    release that failed while the primary was dead (and said so), or an acquire whose SET the
    primary ran, and passed to its replica, without its answer reaching the client (each
    contender has at most one SET in flight at the kill). Every key left must so have been set
    before the kill: one set after it is one that a client failed to unlock on a live primary."""
    monkeypatch.setattr(_cluster._MapOf, "lifetime_s", 3600.0)
    names = names_in_one_slot(4)
    slot = key_slot(names[0].encode())
    primary = fresh_cluster.server_on(fresh_cluster.owners()[slot])
    replica = fresh_cluster.replica_of(primary)
    contenders = Contenders(make_redlock, fresh_cluster.url, names)
    try:
        contenders.progress(20, "acquisitions before the failover")
        fresh_cluster.kill_primary(primary)
        killed_at = time.monotonic()
        fresh_cluster.wait_for_promotion(replica)
        before = contenders.violations
        started = time.monotonic()
        contenders.progress(30, "acquisitions after the promotion")
        assert time.monotonic() - started < PROGRESS_S
    finally:
        contenders.close()
    assert contenders.violations == before
    admin = replica.admin()
    left = admin.keys("*migrating*")
    for key in left:
        pttl_ms = admin.pttl(key)
        # (set before the kill: less ttl left than the time since the kill took; 100 ms slack)
        since_kill_ms = (time.monotonic() - killed_at) * 1000
        assert pttl_ms < TTL_S * 1000 - since_kill_ms + 100, (key, pttl_ms, since_kill_ms)
    failed_releases = [error for error in contenders.errors if error.startswith("release:")]
    assert len(left) <= len(failed_releases) + len(contenders.threads), contenders.errors


def test_a_whole_cluster_down_is_one_place_down(make_redlock, fresh_cluster, masters5, key):
    """A cluster and two standalone masters (three places, quorum 2): with every node of the
    cluster stopped (SIGSTOP), locks are still taken and released on the other two, the cluster
    voting TIMEOUT; once it resumes, it votes again."""
    rl = make_redlock(
        [fresh_cluster.url, *[server.url for server in masters5[:2]]], master_timeout=0.05
    )
    try:
        lock = rl.lock(key, 10)
        assert lock.acquire(blocking=False)
        lock.release()
        for server in fresh_cluster.live():
            server.stop()
        try:
            for i in range(5):
                lock = rl.lock(f"{key}:{i}", 10)
                assert lock.acquire(blocking=False), lock.last_votes
                votes = [vote.outcome.name for vote in lock.stats.votes]
                assert votes[0] in ("TIMEOUT", "SKIPPED", "CONN_ERROR"), votes
                lock.release()
        finally:
            for server in fresh_cluster.live():
                server.cont()
        fresh_cluster.ready()
        lock = rl.lock(key, 10)
        assert lock.acquire(timeout=10)
        assert lock.stats.votes[0].outcome.name in ("OK", "SKIPPED")
        lock.release()
    finally:
        rl.close()
