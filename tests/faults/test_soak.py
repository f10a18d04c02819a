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

9. Every kind at once: on the same 5 faulted masters (AOF), under the nemesis of 7., 8 worker
   processes, two per kind (one native and sync, one python and async), contend for a mutex
   (2 threads each, one process fenced), a fair lock (3 threads each, requests through the
   RequestGate), a semaphore of 3 permits (3 threads each) and a read-write lock (3 threads
   each, a writer for two readers), SOAK_KINDS_CALLS calls per kind (default 2,000).  Each kind
   is judged by its own oracles (faults.scenario, as in the tier-1 files of each kind): 0
   violations; >= 95% of each kind's calls succeed; the fair lock's order inversions are
   reported (allowed under faults); one leak scan of every key at the end (marks and queues
   within their window) is clean; connections per master stay bounded (twice 7.'s bound: twice
   the processes).

SOAK_CALLS, SOAK_NETNS_CALLS and SOAK_KINDS_CALLS (environment) change the number of calls.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time

import pytest
from support import EXTRA_SLACK

from faults.masters import FaultyMasters, random_fault
from faults.nemesis import Nemesis
from faults.oracles import leak_scan
from faults.scenario import RETRY_DELAY, SUMMARIES, Lab, Scenario, dump_dir, pct, seed_for
from faults.worker import WorkerPool
from hiredlock import HiredlockError, Redlock

pytest_plugins = ["faults.plugin"]
FAULT_TIER = 2  # every test here is marked `soak` (faults.plugin)

TTL = 1.0
MT = 0.05
DRIFT = TTL * 0.01 + 0.002
ACQUIRE_TIMEOUT = 2.0
CALLS = int(os.environ.get("SOAK_CALLS", "10000"))
NETNS_CALLS = int(os.environ.get("SOAK_NETNS_CALLS", "10000"))
KINDS_CALLS = int(os.environ.get("SOAK_KINDS_CALLS", "2000"))
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


# The kinds of the mixed soak (9.): Scenario options, threads per process, critical section (ms),
# chosen so that each kind's calls take about as long as the others' (the fair lock's are paced
# by its RequestGate, one call per 15 ms at most, and held longer than that so that a queue
# forms), so they overlap from start to end.
KINDS = {
    "lock": ({}, 2, [8.0, 16.0]),
    "fair": ({}, 3, [10.0, 20.0]),
    "semaphore": ({"permits": 3}, 3, [30.0, 60.0]),
    "rwlock": ({"roles": ("r", "r", "w")}, 3, [15.0, 35.0]),
}
KIND_WORKERS = (("native", "sync"), ("python", "async"))  # each kind's two processes


def test_soak_all_kinds(aof_masters, judge_server):
    judge_server.admin().flushall()
    pool = WorkerPool(len(KINDS) * len(KIND_WORKERS))
    try:
        lab = Lab(aof_masters, judge_server, pool)
        seed = seed_for("soak-kinds")
        scns, cmds = {}, []
        for kind, (options, threads, cs_ms) in KINDS.items():
            scn = scns[kind] = Scenario(
                f"soak kinds {kind} (native sync + python async)",
                "mixed",
                lab,
                via="proxy",
                seed=seed,
                kind=kind,
                contenders=threads * len(KIND_WORKERS),
                scan_leaks=False,  # one scan of everything at the end, below
                **options,
            )
            timeout = ACQUIRE_TIMEOUT + EXTRA_SLACK
            kind_cmds = scn.contend_cmds(
                KINDS_CALLS, len(KIND_WORKERS), acquire_timeout=timeout, cs_ms=cs_ms
            )
            for i, ((engine, api), cmd) in enumerate(zip(KIND_WORKERS, kind_cmds)):
                label = f"{kind}{i}-{engine}-{api}"
                cmd.update(
                    engine=engine,
                    api=api,
                    label=label,
                    fencing=kind == "lock" and i == 0,
                    results_path=os.path.join(dump_dir(), f"soak-kinds-{label}-{os.getpid()}.json"),
                )
            cmds += kind_cmds
        start_at = time.monotonic_ns() + 500_000_000
        for cmd in cmds:
            cmd["start_at_ns"] = start_at
        nemesis = Nemesis(aof_masters, lambda rng: random_fault(rng, TTL, DRIFT), seed=seed)
        sampler = Sampler(aof_masters.servers)
        t0 = time.monotonic()
        with contextlib.ExitStack() as stack:
            for scn in scns.values():
                stack.enter_context(scn)
            sampler.start()
            nemesis.start()
            try:
                per = KINDS_CALLS // len(KIND_WORKERS)
                results = pool.contend(cmds, timeout=per * (ACQUIRE_TIMEOUT + 1) + 600)
            finally:
                nemesis.stop()
                sampler.stopping.set()
                sampler.join(10)
            for n, scn in enumerate(scns.values()):
                mine = results[n * len(KIND_WORKERS) : (n + 1) * len(KIND_WORKERS)]
                scn.add_worker_results(mine)
                starts = [c[0] for res in mine for c in res["calls"]]
                ends = [c[0] + c[1] for res in mine for c in res["calls"]]
                scn.notes.append(
                    f"calls from +{(min(starts) / 1e9 - t0):.1f}s to +{(max(ends) / 1e9 - t0):.1f}s"
                    f"; nemesis applied {nemesis.applied} faults (max {nemesis.max_seen} masters "
                    f"at once, seed {nemesis.seed}); max connections per master "
                    f"{sampler.max_conns}"
                )
        # Every kind's keys on the masters, once all are done: lock, permit and writer keys
        # within the ttl, readers' entries within the ttl, read-write marks and fair queues
        # within their waiting window (they expire on their own: see leak_scan).
        since = max(scn.t_last_release for scn in scns.values())
        window = scns["fair"].rw_window_ms
        leaks = leak_scan(
            aof_masters.servers,
            int(TTL * 1000),
            since,
            rw_window_ms=window,
            fair_window_ms=window,
        )
        SUMMARIES.append(f"[fault] soak kinds: one leak scan of every kind's keys: {leaks[:5]}")
        for scn in scns.values():
            scn.leaks = leaks
        for kind, scn in scns.items():
            scn.check_safety()
            calls = scn.cont["calls"]
            rate = scn.cont["ok"] / max(1, calls)
            scn.expect(calls == KINDS_CALLS, f"{kind}: {calls} calls made, not {KINDS_CALLS}")
            scn.expect(rate >= 0.95, f"{kind}: {scn.cont['ok']}/{calls} succeeded ({rate:.1%})")
        scns["semaphore"].expect(
            scns["semaphore"].occupancy_max <= 3, "more than 3 holders of the semaphore"
        )
        scns["rwlock"].expect(scns["rwlock"].writer_max <= 1, "two writers inside at once")
        scns["rwlock"].expect(scns["rwlock"].reader_max > 1, "readers never overlapped")
        scns["fair"].expect(
            scns["fair"].order()["judged_pairs"] > 0, "the fair lock's order was never judged"
        )
        scns["lock"].expect(
            sampler.max_conns <= 2 * CONN_BOUND,
            f"up to {sampler.max_conns} connections on one master (bound {2 * CONN_BOUND})",
        )
        scns["lock"].expect(nemesis.max_seen <= 2, f"{nemesis.max_seen} masters faulted at once")
        scns["lock"].expect(not nemesis.errors, f"nemesis errors: {nemesis.errors[:5]}")
    finally:
        pool.close()
