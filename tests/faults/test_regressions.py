"""Fault injection, tier 1: the library bugs the fault scenarios found (all fixed now), each pinned
by one small, deterministic test.  See faults/known_bugs.py for each bug's analysis."""

from __future__ import annotations

import statistics
import time

import pytest
from support import urls

from hiredlock import LockLost, Outcome, QuorumUnreachable

pytest_plugins = ["faults.plugin"]

MT = 0.05
RESTART_RUNS = 15


def test_frozen_minority_costs_release_one_timeout(engine, make_redlock, masters5, key):
    """Bug B1 (python engine; fixed in bfba2ba).  Two of five masters SIGSTOPped: the first
    release waits for them (master_timeout); from then on they owe replies and are not waited
    for (README, _engines/contract.py), so later releases take about as long as the healthy masters
    need."""
    rl = make_redlock(urls(masters5), master_timeout=MT)
    warm = rl.lock(key + ":warm", 5)
    assert warm.acquire(blocking=False)
    warm.release()
    for m in masters5[:2]:
        m.stop()
    try:
        releases = []
        for i in range(12):
            lock = rl.lock(f"{key}:{i}", 5)
            assert lock.acquire(blocking=False)
            t0 = time.monotonic()
            lock.release()
            releases.append(time.monotonic() - t0)
    finally:
        for m in masters5[:2]:
            m.cont()
    later = statistics.median(releases[2:])
    assert later < MT / 2, (
        f"median release {later * 1e3:.1f} ms: {[round(x * 1e3, 1) for x in releases]}"
    )


def test_generic_error_keeps_its_code(make_redlock, redis_factory, key):
    """Bug B3 (python engine; fixed in e5f0a8d).  An -ERR reply (an ACL refusal inside the fenced
    acquire script) is an ERROR vote whose detail is the server's text, code included, on both
    engines."""
    (srv,) = redis_factory(1)
    srv.admin().execute_command(
        "ACL", "SETUSER", "lim", "reset", "on", ">pw", "~*", "&*", "+@all", "-set"
    )
    rl = make_redlock([f"redis://lim:pw@127.0.0.1:{srv.port}/0"], retry_count=1)
    with pytest.raises(QuorumUnreachable) as ei:
        rl.lock(key, 5, fencing=True).acquire(blocking=False)
    (vote,) = ei.value.votes
    assert vote.outcome == Outcome.ERROR, vote
    assert vote.detail.startswith("ERR The user executing the script"), vote


def test_restarted_masters_used_in_the_next_round(engine, make_redlock, redis_factory):
    """Two of three masters killed and new servers started on their ports while two locks are
    held; the third master holds the name, so both new servers are needed: the next acquire
    replaces the closed connections in its round and gets both OKs (README)."""
    import subprocess
    import tempfile

    from servers import REDIS_SERVER

    from faults.proxy import _pdeathsig

    missed = []
    for run in range(RESTART_RUNS):
        servers = redis_factory(3)
        rl = make_redlock(urls(servers), retry_count=1)
        for i in range(2):
            assert rl.lock(f"held{run}:{i}", 30).acquire(blocking=False)
        procs = []
        try:
            for s in servers[:2]:
                port = s.port
                s.kill()
                procs.append(
                    subprocess.Popen(
                        [
                            REDIS_SERVER,
                            "--port",
                            str(port),
                            "--bind",
                            "127.0.0.1",
                            "--save",
                            "",
                            "--dir",
                            tempfile.mkdtemp(prefix="hlre-"),
                        ],
                        stdout=subprocess.DEVNULL,
                        preexec_fn=_pdeathsig,
                    )
                )
            servers[2].admin().set(f"k{run}", "foreign", px=60000)
            time.sleep(0.2)
            lock = rl.lock(f"k{run}", 5)
            try:
                got = lock.acquire(blocking=False)
                votes = lock.last_votes
            except QuorumUnreachable as exc:
                got, votes = False, exc.votes
            if not got:
                missed.append((run, [(v.outcome.name, v.detail) for v in votes]))
            else:
                lock.release()
            rl.close()
        finally:
            for p in procs:
                p.kill()
                p.wait()
    assert not missed, f"{len(missed)} of {RESTART_RUNS} runs failed: {missed[:3]}"


def test_connections_closed_by_the_server_are_replaced(
    engine, request, make_redlock, redis_factory
):
    """Two of three masters close the library's connections (CLIENT KILL) right after an acquire:
    the next round (extend) must reconnect to them, not fail: all three still hold the key.
    (B4's false LockLost, fixed by checking every open connection before a round.)"""
    servers = redis_factory(3)
    failed = []
    for run in range(5):
        rl = make_redlock(urls(servers))
        lock = rl.lock(f"closed{run}", 5)
        assert lock.acquire(blocking=False)
        for s in servers[:2]:
            s.admin().execute_command("CLIENT", "KILL", "TYPE", "normal")
        try:
            lock.extend()
            lock.release()
        except LockLost as exc:
            failed.append((run, [(v.outcome.name, v.detail) for v in exc.votes]))
        rl.close()
    assert not failed, f"false LockLost in {len(failed)} of 5 runs: {failed[:2]}"


def test_unlock_with_a_late_noscript(engine, request, make_redlock, fault_masters):
    """Master 0 answers 60 ms late each way (a 120 ms round trip > the 50 ms master_timeout, and
    > the 100 ms a connection opened in the round may take: CONNECT_TIMEOUT_MIN_MS) and
    its script cache is empty; master 2 holds the name.  The attempt fails (master 0 timed out);
    its SET did land on master 0, and so does the unlock (EVALSHA), whose NOSCRIPT comes back
    after the unlock round ended.  The EVAL must still be sent: no key is left on master 0,
    although this client makes no further round.  (Bug B2, fixed: a connection that has not run
    the script yet is sent EVAL, not EVALSHA.)"""
    from faults.masters import Fault

    fault_masters.reset()
    servers = fault_masters.servers[:3]
    urls3 = [fault_masters.proxy.url(0), servers[1].url, servers[2].url]
    servers[2].admin().set("late-noscript", "foreign", px=60000)
    latency = Fault("latency", {"ms": 60})
    latency.apply(fault_masters, [0])
    try:
        rl = make_redlock(urls3, master_timeout=MT, retry_count=1)
        lock = rl.lock("late-noscript", 5)
        assert lock.acquire(blocking=False) is False
        time.sleep(0.5)  # every delayed byte has arrived; no further round is made
        left = servers[0].admin().get("late-noscript")
    finally:
        fault_masters.heal()
    assert left is None, f"master 0 still holds the failed attempt's key: {left!r}"
