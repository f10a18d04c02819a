"""Fault injection, tier 2 (marker `soak`, `make soak`; skipped in the default run).

7. 10,000 contended acquire(timeout=2) calls by 4 worker processes (2 on the native engine, 2 on
   the python one; 2 fenced, 2 plain) on one lock name, while a nemesis, every 0.5-2 s, faults at
   most 2 of the 5 masters (kill then restart after ttl + drift, SIGSTOP 0.1-3 s, DEBUG SLEEP,
   CLIENT PAUSE, proxy latency, blackhole, reset, drop_replies, half_reply, SCRIPT FLUSH) and heals
   everything at the end.  The masters run with AOF (appendfsync always), which the fencing
   counters need across restarts (README).  0 violations by any oracle; >= 95% of the calls
   succeed and none overruns its deadline by more than 100 ms; leak scan clean; each worker's RSS
   grows < 10% after warm-up; connections per master stay bounded.
8. The same with the masters in a network namespace of ours (root only): partitions (DROP both
   ways), REJECT with tcp-reset, one-way reply drop and 20% random loss, by nftables inside the
   namespace, plus kills and SIGSTOPs; and no connect attempt lasts longer than its timeout (a
   prober acquires with blocking=False on fresh connections all along).

SOAK_CALLS and SOAK_NETNS_CALLS (environment) change the number of calls.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time

import pytest
from faults.masters import FaultyMasters, random_fault
from faults.nemesis import Nemesis
from faults.scenario import RETRY_DELAY, Lab, Scenario, dump_dir, pct, seed_for
from support import EXTRA_SLACK

from hiredlock import HiredlockError, Redlock

pytest_plugins = ["faults.plugin"]
FAULT_TIER = 2  # every test here is marked `soak` (faults.plugin)

TTL = 1.0
MT = 0.05
DRIFT = TTL * 0.01 + 0.002
ACQUIRE_TIMEOUT = 2.0
CALLS = int(os.environ.get("SOAK_CALLS", "10000"))
NETNS_CALLS = int(os.environ.get("SOAK_NETNS_CALLS", "10000"))
ENGINES = ("native", "python", "native", "python")
CONN_BOUND = 16  # per master: 4 workers, one engine each, plus reconnect churn and the prober


class Sampler(threading.Thread):
    """Samples the library's connections per master (server side) every second."""

    def __init__(self, servers):
        super().__init__(daemon=True)
        self.servers = servers
        self.stopping = threading.Event()
        self.max_conns = 0
        self.samples = []

    def run(self):
        while not self.stopping.wait(1.0):
            counts = []
            for srv in self.servers:
                try:
                    if srv.alive and not srv.stopped:
                        counts.append(len(srv.foreign_clients()))
                except Exception:
                    pass  # a master being faulted right now
            if counts:
                self.samples.append(counts)
                self.max_conns = max(self.max_conns, max(counts))


class Prober(threading.Thread):
    """acquire(blocking=False) every 50 ms, on fresh connections every 10th time: each call must
    return within 2 x master_timeout + 20 ms: no connect attempt outlasts its timeout."""

    def __init__(self, urls, engine, prefix):
        super().__init__(daemon=True)
        self.urls, self.engine, self.prefix = urls, engine, prefix
        self.stopping = threading.Event()
        self.durations = []
        self.escaped = []

    def run(self):
        rl = None
        i = 0
        try:
            while not self.stopping.wait(0.05):
                if i % 10 == 0:
                    if rl is not None:
                        rl.close()
                    rl = Redlock(self.urls, backend=self.engine, master_timeout=MT, retry_count=1)
                lock = rl.lock(f"{self.prefix}:{i}", TTL)
                i += 1
                t0 = time.monotonic()
                try:
                    got = lock.acquire(blocking=False)
                except HiredlockError:
                    got = False
                except Exception as exc:
                    got = False
                    self.escaped.append(repr(exc))
                self.durations.append(time.monotonic() - t0)
                if got:  # (LockLost if a master faulted meanwhile: the key expires then)
                    with contextlib.suppress(HiredlockError):
                        lock.release()
        finally:
            if rl is not None:
                rl.close()


def run_soak(scn: Scenario, lab: Lab, make_fault, calls: int, prober_engine=None):
    pool = lab.pool
    nemesis = Nemesis(lab.masters, make_fault, seed=scn.seed)
    sampler = Sampler(lab.masters.servers)
    prober = Prober(scn.urls, prober_engine, scn.name + ":probe") if prober_engine else None
    name = scn.name + ":c"
    scn.judges.append(name)
    per = calls // len(pool)
    start_at = time.monotonic_ns() + 500_000_000
    cmds = [
        {
            "engine": ENGINES[i % len(ENGINES)],
            "masters": scn.urls,
            "judge": lab.judge_url,
            "name": name,
            "ttl": TTL,
            "master_timeout": MT,
            "retry_delay": RETRY_DELAY,
            "fencing": i < 2,
            "cs_ms": [1, 5],
            "acquire_timeout": ACQUIRE_TIMEOUT,
            "calls": per,
            "start_at_ns": start_at,
            "seed": scn.rng.randrange(2**31),
            "label": f"w{i}-{ENGINES[i % len(ENGINES)]}",
            "rss_every": max(1, per // 20),
            "results_path": os.path.join(
                dump_dir(), f"{scn.title.replace(' ', '_')}-w{i}-{os.getpid()}.json"
            ),
        }
        for i in range(len(pool))
    ]
    with scn:
        sampler.start()
        nemesis.start()
        if prober:
            prober.start()
        try:
            results = pool.contend(cmds, timeout=per * (ACQUIRE_TIMEOUT + 1) + 600)
        finally:
            if prober:
                prober.stopping.set()
                prober.join(30)
            nemesis.stop()
            sampler.stopping.set()
            sampler.join(10)
        scn.add_worker_results(results)
        scn.notes.append(
            f"nemesis applied {nemesis.applied} faults (max {nemesis.max_seen} masters at once, "
            f"seed {nemesis.seed}); max connections per master {sampler.max_conns}"
        )
        overrun = max([d - ACQUIRE_TIMEOUT for d in scn.cont["lat"]], default=0)
        scn.notes.append(f"deadline overrun max {max(0.0, overrun) * 1e3:.0f} ms")
        for res in results:
            rss = [kb for _n, kb in res["rss"]]
            scn.notes.append(f"{res['label']} RSS {rss[0]}->{rss[-1]} kB")
        if prober is not None:
            done = prober.durations
            scn.notes.append(
                f"prober {len(done)} acquire attempts: p99 {pct(done, 0.99) * 1e3:.1f} ms, "
                f"max {max(done, default=0) * 1e3:.1f} ms"
            )
    return results, nemesis, sampler, prober


def check_soak(scn: Scenario, results, nemesis, sampler, prober):
    scn.check_safety()
    calls = scn.cont["calls"]
    rate = scn.cont["ok"] / max(1, calls)
    scn.expect(rate >= 0.95, f"{scn.cont['ok']}/{calls} acquire calls succeeded ({rate:.1%} < 95%)")
    limit = ACQUIRE_TIMEOUT + 0.1 + EXTRA_SLACK
    over = [d for d in scn.cont["lat"] if d > limit]
    scn.expect(
        not over,
        f"{len(over)} acquire calls overran their deadline by > 100 ms: {sorted(over)[-5:]}",
    )
    scn.expect(nemesis.max_seen <= 2, f"the nemesis faulted {nemesis.max_seen} masters at once")
    scn.expect(not nemesis.errors, f"nemesis errors: {nemesis.errors[:5]}")
    for res in results:
        rss = res["rss"]
        warm = [kb for n, kb in rss if n >= len(res["calls"]) * 0.2]
        if len(warm) >= 2:
            growth = (warm[-1] - warm[0]) / warm[0]
            scn.expect(growth < 0.10, f"{res['label']}: RSS grew {growth:.1%} after warm-up: {rss}")
    scn.expect(
        sampler.max_conns <= CONN_BOUND,
        f"up to {sampler.max_conns} connections on one master (bound {CONN_BOUND})",
    )
    if prober is not None:
        bound = 2 * MT + 0.02 + EXTRA_SLACK
        slow = [d for d in prober.durations if d > bound]
        scn.expect(not prober.escaped, f"prober: untyped exceptions {prober.escaped[:3]}")
        scn.expect(
            not slow,
            f"{len(slow)} prober attempts took longer than {bound * 1e3:.0f} ms: "
            f"{sorted(slow)[-5:]}",
        )


@pytest.fixture
def aof_masters(redis_server_bin):
    m = FaultyMasters(5, aof=True)
    yield m
    m.cleanup()


def test_soak_nemesis(aof_masters, judge_server, worker_pool):
    judge_server.admin().flushall()
    lab = Lab(aof_masters, judge_server, worker_pool)
    scn = Scenario("soak nemesis", "mixed", lab, via="proxy", seed=seed_for("soak"))
    results, nemesis, sampler, _ = run_soak(
        scn, lab, lambda rng: random_fault(rng, TTL, DRIFT), CALLS
    )
    check_soak(scn, results, nemesis, sampler, None)


def test_soak_netns(judge_server, worker_pool):
    from faults import netns

    reason = netns.unavailable()
    if reason:
        pytest.skip(reason)
    masters = netns.NetnsMasters(5)
    try:
        judge_server.admin().flushall()
        lab = Lab(masters, judge_server, worker_pool)
        scn = Scenario("soak netns", "mixed", lab, via="netns", seed=seed_for("soak-netns"))
        results, nemesis, sampler, prober = run_soak(
            scn, lab, lambda rng: netns.random_fault(rng, TTL, DRIFT), NETNS_CALLS, "native"
        )
        check_soak(scn, results, nemesis, sampler, prober)
    finally:
        masters.cleanup()
