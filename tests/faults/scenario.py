"""The scenario runner: standard parameters, the uncontended and contended workloads, the checks
of every oracle, one summary line per scenario, and a dump (oracle log, fault schedule, seed) when
a scenario fails.

    scn = Scenario("minority kill x2", engine, lab, fault=Fault("kill"), faulted=[0, 1])
    with scn:                        # applies the fault; heals, scans for leaks and reports on exit
        scn.uncontended(200)
        scn.contended(200)
    scn.check_tier1()                # raises AssertionError naming the dump file

The workload's kind is "lock" (the default) or "semaphore": then every call takes a permit of a
semaphore with `permits` permits (Scenario(..., kind="semaphore", permits=3)), the occupancy
oracle of the contended name allows `limit` holders (the permits unless given: a larger number of
permits than `limit` is a negative control), each permit is judged as a lock of its own (interval,
occupancy, lost-update oracles on name:p<index>), and `contenders` threads (async: tasks) spread
over the worker processes contend (default: one per worker).

The kind "rwlock" is a read-write lock (Scenario(..., kind="rwlock", roles=("r", "r", "w"))):
contender j is a reader or a writer as roles[j % len(roles)] says; each worker process makes one
RWLock of the contended name, shared by its threads (async: tasks), and each call acquires a new
lock object from its read() or write().  The name's RWJudge (faults.oracles) reads the writers'
and the readers' occupancies at every entry in one step: a writer with any other holder is a
violation, readers together are not (reader_max shows they overlapped); writers keep the
lost-update counter, readers check it did not change while they read (torn reads).  The interval
oracle is rw_interval_violations; the leak scan checks the readers' entries and the marks'
window too.  The uncontended workload takes a write lock every third call, else a read lock.

The kind "fair" is a fair lock (Scenario(..., kind="fair")): every call acquires a new
Redlock.lock(name, ttl, fair=True) and is judged as a lock (interval, occupancy, lost update);
the contended calls of every process first pass the name's RequestGate (faults.oracles: at least
`gap_ms` apart on the judge's clock), then stamp their request and call acquire(), and
order_report() judges the grant order against the request order (the README's guarantee for
calls >= 10 ms apart).  Inversions are not violations (a fault may cause them): the fault-free
scenario asserts there are none, the faulted ones report them.  The leak scan allows the queue's
keys for one waiting window.
"""

from __future__ import annotations

import json
import os
import random
import re
import tempfile
import time
from dataclasses import dataclass, field

from support import EXTRA_SLACK

from .oracles import (
    FAIR_QUEUE_PREFIXES,
    Interval,
    Judge,
    Request,
    RWJudge,
    interval_violations,
    leak_scan,
    order_report,
    rw_interval_violations,
)

# Standard parameters of the acceptance.
N_MASTERS = 5
TTL = 1.0
MASTER_TIMEOUT = 0.05
WORKERS = 4
CS_MS = (1.0, 5.0)
# Contended workers retry after 25-75 ms: a colliding attempt that needs a faulted master can only
# be decided at its master_timeout (50 ms) and keeps its partial keys until then; a retry jitter
# much shorter than that keeps colliders in step (split-vote livelock: seconds with 10 +- 5 ms).
RETRY_DELAY = 0.05
# Kind "fair": the RequestGate's spacing of the contended calls (ms).  The README orders calls
# made >= 10 ms apart; 5 ms more absorb a thread's delay between the gate and its acquire().
FAIR_GAP_MS = 15.0
ACQUIRE_TIMEOUT = 2.0

SUMMARIES: list[str] = []  # printed at the end of the run by the plugin


def dump_dir() -> str:
    d = os.environ.get("HIREDLOCK_FAULT_DUMP_DIR") or os.path.join(
        tempfile.gettempdir(), "hiredlock-fault-dumps"
    )
    os.makedirs(d, exist_ok=True)
    return d


def seed_for(title: str) -> int:
    """HIREDLOCK_FAULT_SEED fixes every scenario's seed (to replay a failure); else random."""
    env = os.environ.get("HIREDLOCK_FAULT_SEED")
    if env:
        return int(env)
    return random.SystemRandom().randrange(1, 2**31)


def pct(values, q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


@dataclass
class Lab:
    """What a scenario runs against: the faulty masters, the judge and the worker pool."""

    masters: object
    judge: object  # a RedisServer no fault touches
    pool: object
    # "sync": hiredlock.Redlock; "async": hiredlock.aio.AsyncRedlock, through support/apis.py's
    # facade (its calls run as tasks of an event loop), here and in the worker processes.
    api: str = "sync"
    # The event loop of the worker processes' AsyncRedlocks ("asyncio" or "uvloop"); the test
    # process's clients run on asyncio's.
    worker_loop: str = "asyncio"

    @property
    def judge_url(self) -> str:
        return self.judge.url


@dataclass
class Scenario:
    title: str
    engine: str
    lab: Lab
    fault: object = None
    faulted: list = field(default_factory=list)
    via: str | None = None
    ttl: float = TTL
    master_timeout: float = MASTER_TIMEOUT
    seed: int | None = None
    contended_fencing: tuple = (True, True, False, False)  # per worker: fenced or plain locks
    kind: str = "lock"  # or "semaphore" (see the module's docstring)
    permits: int = 1
    limit: int | None = None  # the occupancy oracle's limit: the permits unless given
    contenders: int | None = None  # contending threads in all: one per worker unless given
    roles: tuple = ("r", "r", "w")  # kind "rwlock": contender j's role is roles[j % len(roles)]
    gap_ms: float = FAIR_GAP_MS  # kind "fair": the contended calls' spacing (RequestGate)
    scan_leaks: bool = True  # False: the caller scans (several scenarios on the same masters)
    n_masters: int | None = None  # the clients' masters: the lab's first n (None: all of them)
    # check_degraded: the places (in the votes' order) that the faulted servers make up; when
    # None, the faulted servers' own indices (a server per place)
    faulted_places: list | None = None

    def __post_init__(self):
        if self.limit is None:
            self.limit = self.permits
        if self.seed is None:
            self.seed = seed_for(self.title)
        self.rng = random.Random(self.seed)
        if self.via is None:
            self.via = self.fault.via if self.fault is not None else "direct"
        slug = re.sub(r"[^A-Za-z0-9_.=-]+", "_", self.title)
        self.name = f"f:{slug}:{self.engine}:{self.seed}"
        self.unc = {"calls": 0, "ok": 0, "lat": [], "rel_lat": [], "errors": {}, "escaped": []}
        self.cont = {"calls": 0, "ok": 0, "lat": [], "errors": {}, "escaped": [], "workers": []}
        self.by_role = {"r": [0, 0], "w": [0, 0]}  # kind "rwlock": role -> [successes, calls]
        self.requests: list[Request] = []  # kind "fair": the contended calls (order oracle)
        self.fair_leftover: dict = {}  # kind "fair": port -> tickets still queued after heal
        self._order: dict | None = None
        self.timeline: list = []  # contended calls: [worker, start_ns, duration_ns, outcome]
        self.intervals: list[Interval] = []
        self.judges: list[str] = []  # names judged on the judge server
        self.leaks: list[str] = []
        self.notes: list[str] = []
        self.verdicts: dict = {}
        self.t_start = time.monotonic()
        self.t_last_release = time.monotonic_ns()
        self.elapsed = 0.0
        self.redlocks = []
        self.loop_thread = None  # the event loop of the async API's clients (api "async")
        self.events: list = []  # what the uncontended client's on_event was told

    # -- set-up -----------------------------------------------------------------------------
    @property
    def rw_window_ms(self) -> int:
        """The waiting window of this scenario's clients (README: 3 x retry_delay + 2 master
        timeouts, 100 ms at least): no read-write lock's mark and no fair lock's queue key is
        set for longer."""
        return max(100, int(3000 * RETRY_DELAY + 2000 * self.master_timeout))

    @property
    def urls(self) -> list[str]:
        idx = None if self.n_masters is None else range(self.n_masters)
        return self.lab.masters.urls(self.via, idx)

    def redlock(self, **kw):
        """A client of the scenario's masters on the lab's API (with Redlock's shape)."""
        kw.setdefault("backend", self.engine)
        kw.setdefault("master_timeout", self.master_timeout)
        if self.lab.api == "async":
            from apis import AsyncApi, LoopThread

            if self.loop_thread is None:
                self.loop_thread = LoopThread()
            rl = AsyncApi(self.loop_thread, self.urls, **kw)
        else:
            from hiredlock import Redlock

            rl = Redlock(self.urls, **kw)
        self.redlocks.append(rl)
        return rl

    def __enter__(self) -> Scenario:
        self.lab.masters.log(f"scenario {self.title} engine={self.engine} seed={self.seed}")
        if self.fault is not None and self.faulted:
            self.fault.apply(self.lab.masters, self.faulted)
        return self

    def __exit__(self, *exc) -> None:
        for rl in self.redlocks:
            try:
                rl.close()
            except Exception as e:  # closing must not hide the scenario's own failure
                self.notes.append(f"close: {e!r}")
        if self.loop_thread is not None:
            self.loop_thread.close()
            self.loop_thread = None
        self.lab.masters.heal()
        self.t_last_release = max(self.t_last_release, time.monotonic_ns())
        if self.kind == "fair":
            self.fair_leftover = fair_tickets(self.lab.masters.servers)
        if self.scan_leaks:
            self.leaks = leak_scan(
                self.lab.masters.servers,
                int(self.ttl * 1000),
                self.t_last_release,
                rw_window_ms=self.rw_window_ms if self.kind == "rwlock" else None,
                fair_window_ms=self.rw_window_ms if self.kind == "fair" else None,
            )
        self.elapsed = time.monotonic() - self.t_start
        self._collect_verdicts()
        SUMMARIES.append(self.summary())

    # -- workloads --------------------------------------------------------------------------
    def uncontended(self, n: int, rl=None, fencing: bool = False) -> None:
        """n acquire(blocking=False) of fresh names, one client, in this process: each success
        runs the critical section and is released."""
        from hiredlock import HiredlockError

        rw = self.kind == "rwlock"
        # (read-write and fair locks' clients wait with the contended ones' retry delay: their
        # marks and queues last one window of it)
        windowed = rw or self.kind == "fair"
        told = {"on_event": self.events.append}
        rl = rl or (
            self.redlock(retry_delay=RETRY_DELAY, **told) if windowed else self.redlock(**told)
        )
        judge_name = self.name + ":u"
        judge = (RWJudge if rw else Judge)(self.lab.judge_url, judge_name)
        self.judges.append(judge_name)
        me = f"unc:{os.getpid()}"
        try:
            for i in range(n):
                if self.kind == "semaphore":
                    sem = rl.semaphore(f"{judge_name}:{i}", self.permits, self.ttl)
                elif rw:
                    from .worker import rwlock_sides

                    role = "w" if i % 3 == 2 else "r"
                    lock = rwlock_sides(rl, f"{judge_name}:{i}", self.ttl)[role == "w"]()
                elif self.kind == "fair":
                    lock = rl.lock(f"{judge_name}:{i}", self.ttl, fair=True)
                else:
                    lock = rl.lock(f"{judge_name}:{i}", self.ttl, fencing=fencing)
                t0 = time.monotonic_ns()
                try:
                    if self.kind == "semaphore":
                        lock = sem.acquire(blocking=False)
                        ok = lock is not None
                    else:
                        ok = lock.acquire(blocking=False)
                    outcome = "ok" if ok else "false"
                except HiredlockError as exc:
                    ok, outcome = False, type(exc).__name__
                    self._count(self.unc["errors"], outcome, exc)
                except Exception as exc:
                    ok, outcome = False, "escaped"
                    self.unc["escaped"].append(f"acquire: {exc!r}")
                t1 = time.monotonic_ns()
                self.unc["calls"] += 1
                self.unc["lat"].append((t1 - t0) / 1e9)
                if rw:
                    self.by_role[role][1] += 1
                if not ok:
                    continue
                self.unc["ok"] += 1
                valid_until = t1 + int(lock.validity * 1e9)
                token, fence = lock.token, lock.fence
                if rw:
                    from .worker import _RWSide

                    self.by_role[role][0] += 1
                    _RWSide(judge, role).section(self.rng, CS_MS, me)
                else:
                    occ = judge.enter()
                    v = judge.read_counter()
                    time.sleep(self.rng.uniform(*CS_MS) / 1000.0)
                    judge.write_counter(v + 1)
                    if fence is not None:
                        judge.fenced_write(fence, me)
                    judge.exit()
                    del occ
                released_at = time.monotonic_ns()
                iv_name = f"{judge_name}:{i}:{role}" if rw else lock.name
                self.intervals.append(
                    Interval(iv_name, token, me, t1, valid_until, released_at, fence)
                )
                try:
                    lock.release()
                except HiredlockError as exc:
                    self._count(self.unc["errors"], "release:" + type(exc).__name__, exc)
                except Exception as exc:
                    self.unc["escaped"].append(f"release: {exc!r}")
                self.unc["rel_lat"].append((time.monotonic_ns() - released_at) / 1e9)
                self.t_last_release = time.monotonic_ns()
        finally:
            judge.close()

    def contended(self, n_total: int, *, acquire_timeout: float = ACQUIRE_TIMEOUT, **extra) -> None:
        """WORKERS processes share one lock name, n_total acquire(timeout=...) calls in all
        (the timeout plus HIREDLOCK_TEST_EXTRA_SLACK, an upper time bound like the others); the
        workers start within 20 ms of each other, not in lock-step.  With `contenders`, that
        many threads spread over the workers (and the calls in proportion)."""
        acquire_timeout += EXTRA_SLACK
        pool = self.lab.pool
        cmds = self.contend_cmds(n_total, len(pool), acquire_timeout=acquire_timeout, **extra)
        results = pool.contend(cmds, timeout=60 + n_total * (acquire_timeout + 1))
        client = "AsyncRedlock" if self.lab.api == "async" else "Redlock"
        wrong = [res["label"] for res in results if res.get("client") != client]
        self.expect(not wrong, f"workers {wrong} did not contend through a {client}")
        if self.lab.api == "async":
            loops = [(res.get("loop") or "").split(".")[0] for res in results]
            self.expect(
                all(loop == self.lab.worker_loop for loop in loops),
                f"the workers' event loops were {loops}, not {self.lab.worker_loop}",
            )
        self.add_worker_results(results)

    def contend_cmds(self, n_total: int, n_workers: int, *, acquire_timeout: float, **extra):
        """The "contend" commands of n_workers worker processes sharing n_total calls on the
        scenario's contended name (see contended(); the soak of all kinds sends several
        scenarios' commands to one pool at once)."""
        name = self.name + ":c"
        self.judges.append(name)
        if self.kind == "semaphore":
            self.judges += [f"{name}:p{i}" for i in range(self.permits)]
        contenders = self.contenders or n_workers
        threads = [contenders // n_workers + (i < contenders % n_workers) for i in range(n_workers)]
        shares = [n_total // contenders + (j < n_total % contenders) for j in range(contenders)]
        per = [sum(shares[sum(threads[:i]) : sum(threads[: i + 1])]) for i in range(n_workers)]
        roles = [self.roles[j % len(self.roles)] for j in range(contenders)]
        start_at = time.monotonic_ns() + 200_000_000
        cmds = []
        for i in range(n_workers):
            cmds.append(
                {
                    "api": self.lab.api,
                    "loop": self.lab.worker_loop,
                    "engine": self.engine,
                    "masters": self.urls,
                    "judge": self.lab.judge_url,
                    "name": name,
                    "ttl": self.ttl,
                    "master_timeout": self.master_timeout,
                    "retry_delay": RETRY_DELAY,
                    "fencing": self.kind == "lock"
                    and self.contended_fencing[i % len(self.contended_fencing)],
                    "cs_ms": list(CS_MS),
                    "acquire_timeout": acquire_timeout,
                    "calls": per[i],
                    "start_at_ns": start_at + self.rng.randrange(20_000_000),
                    "seed": self.rng.randrange(2**31),
                    "label": f"w{i}",
                    "results_path": os.path.join(dump_dir(), f"w{i}-{os.getpid()}.json"),
                    "kind": self.kind,
                    "permits": self.permits,
                    "limit": self.limit,
                    "threads": threads[i],
                    "roles": roles[sum(threads[:i]) : sum(threads[: i + 1])],
                    "gap_ms": self.gap_ms if self.kind == "fair" else None,
                    **extra,
                }
            )
        return cmds

    def add_worker_results(self, results) -> None:
        for res in results:
            self.cont["workers"].append(
                {
                    k: res[k]
                    for k in (
                        "label",
                        "errors",
                        "release_errors",
                        "occupancy_seen",
                        "fence_refused",
                        "lost_mid_section",
                        "rss",
                    )
                }
            )
            for t0, dur, outcome, *role in res["calls"]:
                self.timeline.append([res["label"], t0, dur, outcome, *role])
                if role:
                    self.by_role[role[0]][0] += outcome == "ok"
                    self.by_role[role[0]][1] += 1
                self.cont["calls"] += 1
                self.cont["lat"].append(dur / 1e9)
                if outcome == "ok":
                    self.cont["ok"] += 1
                else:
                    self.cont["errors"][outcome] = self.cont["errors"].get(outcome, 0) + 1
            self.cont["escaped"].extend(res["escaped"])
            self.requests += [Request(*r) for r in res.get("requests", ())]
            self._order = None
            for iv in res["intervals"]:
                self.intervals.append(Interval(*iv))
                self.t_last_release = max(self.t_last_release, iv[5])

    @staticmethod
    def _count(errors: dict, key: str, exc) -> None:
        errors[key] = errors.get(key, 0) + 1

    # -- verdicts ---------------------------------------------------------------------------
    def _collect_verdicts(self) -> None:
        for name in self.judges:
            j = (RWJudge if self.kind == "rwlock" else Judge)(self.lab.judge_url, name)
            try:
                self.verdicts[name] = j.verdict()
            finally:
                j.close()

    def interval_violations(self) -> list:
        if self.kind == "rwlock":
            return rw_interval_violations(self.intervals)
        return interval_violations(self.intervals)

    def violations(self) -> dict:
        v = {
            "interval": len(self.interval_violations()),
            "occupancy": sum(x["occupancy_violations"] for x in self.verdicts.values()),
            "lost_update": sum(abs(x["counter"] - x["completed"]) for x in self.verdicts.values()),
            "fence": sum(x["fence_rejections"] for x in self.verdicts.values()),
        }
        if self.kind == "rwlock":
            v["torn_read"] = sum(x["torn_reads"] for x in self.verdicts.values())
        v["total"] = sum(v.values())
        return v

    def order(self) -> dict:
        """Kind "fair": the order oracle's report (faults.oracles.order_report) of the
        contended calls: judged_pairs, inversions, overtaken, close_pairs, waiting_max, sample."""
        if self._order is None:
            self._order = order_report(self.requests)
        return self._order

    @property
    def reader_max(self) -> int:
        """Read-write lock: the most readers the judge saw inside at once."""
        return max((x.get("reader_max", 0) for x in self.verdicts.values()), default=0)

    @property
    def writer_max(self) -> int:
        """Read-write lock: the most writers the judge saw inside at once."""
        return max((x.get("writer_max", 0) for x in self.verdicts.values()), default=0)

    @property
    def occupancy_max(self) -> int:
        """The most holders the occupancy oracles saw at once (for a semaphore: of its name)."""
        return max((x["occupancy_max"] for x in self.verdicts.values()), default=0)

    @property
    def acquisitions(self) -> int:
        return self.unc["calls"] + self.cont["calls"]

    @property
    def successes(self) -> int:
        return self.unc["ok"] + self.cont["ok"]

    def summary(self) -> str:
        v = self.violations()
        lat = self.unc["lat"] + self.cont["lat"]
        parts = [
            f"[fault] {self.title} api={self.lab.api} engine={self.engine} seed={self.seed}:",
            f"acquisitions={self.acquisitions} successes={self.successes}",
        ]
        if self.unc["calls"] and not self.unc["lat"]:
            parts.append(f"(uncontended {self.unc['ok']}/{self.unc['calls']})")
        if self.unc["lat"]:
            parts.append(
                f"(uncontended {self.unc['ok']}/{self.unc['calls']}"
                f" p50={pct(self.unc['lat'], 0.5) * 1e3:.1f}ms"
                f" p99={pct(self.unc['lat'], 0.99) * 1e3:.1f}ms"
                f" max={max(self.unc['lat']) * 1e3:.1f}ms"
                f" release p50={pct(self.unc['rel_lat'], 0.5) * 1e3:.1f}ms)"
            )
        if self.cont["lat"]:
            parts.append(
                f"(contended {self.cont['ok']}/{self.cont['calls']}"
                f" p50={pct(self.cont['lat'], 0.5) * 1e3:.1f}ms"
                f" p99={pct(self.cont['lat'], 0.99) * 1e3:.1f}ms)"
            )
        torn = f", torn-read {v['torn_read']}" if "torn_read" in v else ""
        parts.append(
            f"violations={v['total']} (interval {v['interval']}, occupancy {v['occupancy']},"
            f" lost-update {v['lost_update']}, fence {v['fence']}{torn})"
        )
        if self.kind == "rwlock":
            (r_ok, r_n), (w_ok, w_n) = self.by_role["r"], self.by_role["w"]
            parts.append(
                f"rwlock writers max={self.writer_max} readers max={self.reader_max}"
                f" (reads {r_ok}/{r_n}, writes {w_ok}/{w_n})"
            )
        elif self.kind == "fair":
            o = self.order()
            parts.append(
                f"fair order: {o['requests']} requests, {o['judged_pairs']} pairs judged,"
                f" inversions={o['inversions']} ({o['overtaken']} requests overtaken),"
                f" {o['close_pairs']} close pairs, waiting max {o['waiting_max']}"
            )
            if o["sample"]:
                parts.append("first inversions: " + " | ".join(o["sample"][:3]))
            if self.fair_leftover:
                parts.append(f"queued after heal: {self.fair_leftover}")
        elif self.kind != "lock":
            parts.append(
                f"{self.kind}(permits={self.permits}) occupancy max={self.occupancy_max}"
                f" (limit {self.limit})"
            )
        parts.append(f"leaked={len(self.leaks)}" if self.scan_leaks else "leaked=(scanned apart)")
        parts.append(f"p50={pct(lat, 0.5) * 1e3:.1f}ms p99={pct(lat, 0.99) * 1e3:.1f}ms")
        errs = {**self.unc["errors"], **{f"c:{k}": n for k, n in self.cont["errors"].items()}}
        if errs:
            parts.append(f"errors={errs}")
        if self.notes:
            parts.append("notes: " + "; ".join(self.notes))
        parts.append(f"{self.elapsed:.1f}s")
        return " ".join(parts)

    def dump(self, reason: str) -> str:
        slug = re.sub(r"[^A-Za-z0-9_.=-]+", "_", self.title)
        path = os.path.join(dump_dir(), f"{slug}-{self.lab.api}-{self.engine}-{self.seed}.json")
        data = {
            "reason": reason,
            "summary": self.summary(),
            "title": self.title,
            "api": self.lab.api,
            "engine": self.engine,
            "seed": self.seed,
            "fault": str(self.fault),
            "faulted": self.faulted,
            "via": self.via,
            "kind": self.kind,
            "permits": self.permits,
            "limit": self.limit,
            "contenders": self.contenders,
            "roles": self.roles,
            "by_role": self.by_role,
            "order": self.order() if self.kind == "fair" else None,
            "fair_leftover": self.fair_leftover,
            "requests": sorted(self.requests),
            "ttl": self.ttl,
            "master_timeout": self.master_timeout,
            "fault_schedule": self.lab.masters.schedule,
            "violations": self.violations(),
            "interval_violations": [
                [a._asdict(), b._asdict()] for a, b in self.interval_violations()[:50]
            ],
            "judge": self.verdicts,
            "leaks": self.leaks,
            "uncontended": {k: v for k, v in self.unc.items() if k not in ("lat", "rel_lat")},
            "contended": {k: v for k, v in self.cont.items() if k != "lat"},
            "notes": self.notes,
            "contended_timeline": sorted(self.timeline, key=lambda c: c[1]),
            "oracle_log": [iv._asdict() for iv in self.intervals],
        }
        with open(path, "w") as f:
            json.dump(data, f, indent=1, default=str)
        return path

    def fail(self, reason: str) -> None:
        path = self.dump(reason)
        sched = "\n".join(f"  {t:8.3f}s {what}" for t, what in self.lab.masters.schedule[:40])
        raise AssertionError(
            f"{reason}\n{self.summary()}\n"
            f"seed={self.seed} (replay: HIREDLOCK_FAULT_SEED={self.seed})"
            f"\noracle log and fault schedule: {path}\nfault schedule:\n{sched}"
        )

    def expect(self, cond: bool, reason: str) -> None:
        if not cond:
            self.fail(reason)

    # -- the standard checks ----------------------------------------------------------------
    def check_safety(self) -> None:
        v = self.violations()
        self.expect(v["total"] == 0, f"oracle violations: {v}")
        self.expect(not self.leaks, f"leak scan: {self.leaks[:10]}")
        escaped = self.unc["escaped"] + self.cont["escaped"]
        self.expect(not escaped, f"untyped exceptions escaped: {escaped[:3]}")

    def liveness_problems(self, min_rate: float = 0.99) -> list[tuple[str, str]]:
        """(kind, text) for each liveness shortfall; kinds: uncontended_rate, contended_rate,
        latency."""
        problems = []
        for label, d in (("uncontended", self.unc), ("contended", self.cont)):
            if d["calls"]:
                rate = d["ok"] / d["calls"]
                if rate < min_rate:
                    problems.append(
                        (
                            f"{label}_rate",
                            f"{label}: {d['ok']}/{d['calls']} succeeded "
                            f"({rate:.1%} < {min_rate:.0%})",
                        )
                    )
        if self.unc["lat"]:
            bound = self.master_timeout + 0.02 + EXTRA_SLACK
            slow = [x for x in self.unc["lat"] if x > bound]
            if slow:
                problems.append(
                    (
                        "latency",
                        f"{len(slow)} uncontended acquires took longer than the per-master "
                        f"timeout + 20 ms ({bound * 1e3:.0f} ms; "
                        f"HIREDLOCK_TEST_EXTRA_SLACK={EXTRA_SLACK}): "
                        f"{[round(x * 1e3, 1) for x in sorted(slow)[-5:]]} ms",
                    )
                )
        return problems

    def degraded(self) -> list:
        """The degraded events the uncontended client was told."""
        return [event for event in self.events if event.kind == "degraded"]

    def check_degraded(self) -> None:
        """Some round of the uncontended client counted while a faulted master failed, and each
        degraded event names faulted masters only (votes are in the masters' order) as failed, or
        as not waited for in a round that waits for every master."""
        from hiredlock import Outcome

        degraded = self.degraded()
        faulted = set(self.faulted if self.faulted_places is None else self.faulted_places)
        self.expect(bool(degraded), "no degraded event while a minority was faulted")
        for event in degraded:
            bad = {
                i
                for i, vote in enumerate(event.votes)
                if vote.outcome not in (Outcome.OK, Outcome.TAKEN)
                and (vote.outcome is not Outcome.SKIPPED or event.operation != "acquire")
            }
            self.expect(
                bool(bad) and bad <= faulted,
                f"a degraded event names masters that were not faulted: {event}",
            )

    def check_tier1_minority(
        self, min_rate: float = 0.99, known_bug: tuple[str, set] | None = None
    ) -> None:
        """Safety always; liveness (success rates, latency bound) too.  `known_bug` is (text,
        kinds of shortfall it explains): when every shortfall is of those kinds, the test xfails
        with the text and the dump instead of failing."""
        self.check_safety()
        problems = self.liveness_problems(min_rate)
        if not problems:
            return
        text = "; ".join(p for _k, p in problems)
        if known_bug and all(k in known_bug[1] for k, _p in problems):
            import pytest

            path = self.dump(text)
            pytest.xfail(f"{known_bug[0]}: {text} (dump: {path})")
        self.fail(text)


def fair_tickets(servers) -> dict:
    """port -> {queue key: tickets} of every fair lock's queue left on the live masters."""
    out = {}
    for srv in servers:
        if not srv.alive:
            continue
        a = srv.admin()
        found = {
            key.decode(errors="replace"): a.zcard(key)
            for prefix in FAIR_QUEUE_PREFIXES
            for key in a.scan_iter(match=prefix + b"*", count=1000)
        }
        if found:
            out[srv.port] = found
    return out
