"""Worker processes for the fault scenarios: the clients that contend for a lock.

Run as a script, a worker reads one JSON command per line on stdin and answers with JSON lines on
stdout.  `WorkerPool` (imported) starts N of them once and reuses them for every scenario (the
engine is a parameter of each command), so no scenario pays for interpreter start-up.

Commands:
  contend  acquire(timeout=...) in a loop (a number of calls, or until a deadline), each success
           followed by a critical section that feeds every oracle; returns per-call outcomes and
           latencies, the intervals held, RSS samples, and any exception that escaped as something
           other than a hiredlock error.  Big results go to a file.  "kind": "lock" (the default)
           or "semaphore" (a permit of one Semaphore with "permits" permits, judged against an
           occupancy "limit"), or "rwlock" (one RWLock of the name per worker: each call takes a
           new lock object from its read() or write(), as the thread's role in "roles" says, "r"
           or "w"; judged by an RWJudge; "writers_read": the writers take read locks, a negative
           control), or "fair" (a new fair lock, Redlock.lock(name, ttl, fair=True), for each
           call; "unfair": a plain lock instead, a negative control; "gap_ms": every call first
           passes the name's RequestGate, then stamps its request: the calls' "requests" give
           the order oracle its record); "threads": how many threads (async: tasks) of the
           worker contend, sharing its client (and semaphore, or RWLock).
  hold     acquire, enter the critical section, say {"event": "in_cs"}, wait for {"op": "go"}, then
           finish the section (the test SIGSTOPs the worker in between).
  exit

Every command may name the API its client uses: "api": "sync" (hiredlock.Redlock, the default) or
"async" (hiredlock.aio.AsyncRedlock, driven through support/apis.py's facade), and for "async" the
event loop: "loop": "asyncio" (the default) or "uvloop".
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import random
import select
import signal
import subprocess
import sys
import time
import traceback

if __name__ == "__main__":
    _TESTS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sys.path[:0] = [_TESTS, os.path.join(_TESTS, "support")]  # the faults package; apis


def _rss_kb() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def _votes(exc) -> str:
    return "; ".join(f"{v.outcome.name}:{(v.detail or '')[:60]}" for v in getattr(exc, "votes", ()))


def _redlock(cmd):
    """(client, end): the worker's client on the API the command names (key "api"), and what to
    call after closing it.  "sync" (the default): hiredlock.Redlock, end None.  "async": an
    AsyncRedlock behind support/apis.py's facade, whose calls run as tasks of an event loop in a
    thread of this process; end() stops that loop."""
    import hiredlock

    options = {
        "backend": cmd["engine"],
        "master_timeout": cmd.get("master_timeout"),
        "retry_delay": cmd.get("retry_delay", 0.01),
        "retry_count": cmd.get("retry_count", 3),
    }
    if cmd.get("api", "sync") == "async":
        from apis import AsyncApi, LoopThread

        runner = _loop_thread(LoopThread, cmd.get("loop", "asyncio"))
        return AsyncApi(runner, cmd["masters"], **options), runner.close
    return hiredlock.Redlock(cmd["masters"], **options), None


def _loop_thread(loop_thread_class, loop: str):
    """A support/apis.py LoopThread whose event loop is asyncio's or uvloop's (`loop`): its loop is
    made with asyncio.new_event_loop(), which follows the event loop policy of the moment."""
    if loop == "asyncio":
        return loop_thread_class()
    import asyncio

    import uvloop

    previous = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    try:
        return loop_thread_class()
    finally:
        asyncio.set_event_loop_policy(previous)


def _close(rl, end) -> None:
    with contextlib.suppress(Exception):
        rl.close()
    if end is not None:
        end()


def _critical_section(judge, rng, cs_ms, fence, me, outer=None) -> dict:
    """The oracles' work under the lock: occupancy, lost-update counter, fenced register.  For a
    semaphore's permit, `judge` is the permit's (one holder at a time) and `outer` the name's
    (its limit is the permits), which counts occupancy only."""
    outer_occ = outer.enter() if outer is not None else None
    occ = judge.enter()
    value = judge.read_counter()
    time.sleep(rng.uniform(*cs_ms) / 1000.0)
    judge.write_counter(value + 1)
    accepted = judge.fenced_write(fence, me) if fence is not None else None
    judge.exit()
    if outer is not None:
        outer.exit()
    return {"occ": occ, "outer_occ": outer_occ, "fence_accepted": accepted}


def _holders(rl, cmd, judge):
    """(for_thread, judges) for the command's "kind"; for_thread(k) gives thread k's (make,
    where).  make() gives what a call acquires from: a new Lock ("lock", the default), the
    process's one Semaphore ("semaphore": "permits" permits, shared by the worker's threads), or
    a new read or write lock of the process's one RWLock ("rwlock": the thread's role in
    "roles").  where(lock) gives the interval oracle's name and the judges (judge, outer) of a
    held lock: a permit is judged as a lock of its own (name:p<index>), inside the name's judge,
    whose limit is the semaphore's (the command's "limit"); a read-write lock's holder by an
    _RWSide of the name's RWJudge, its interval named <name>:r or <name>:w.  judges: the ones
    made here, to close."""
    from faults.oracles import Judge

    name, kind = cmd["name"], cmd.get("kind", "lock")
    if kind == "fair":
        from faults.oracles import RequestGate

        fair = not cmd.get("unfair")
        make = lambda: rl.lock(name, cmd["ttl"], fair=fair)  # noqa: E731
        gate = RequestGate(cmd["judge"], name, cmd["gap_ms"]) if cmd.get("gap_ms") else None

        def where_fair(_lock):
            return name, judge

        where_fair.gate = gate
        return (lambda _k: (make, where_fair)), [gate] if gate else []
    if kind == "lock":
        fencing = bool(cmd.get("fencing"))
        make = lambda: rl.lock(name, cmd["ttl"], fencing=fencing)  # noqa: E731
        return (lambda _k: (make, lambda _: (name, judge))), []
    if kind == "rwlock":
        read, write = rwlock_sides(rl, name, cmd["ttl"])
        roles = cmd.get("roles") or ["r"]
        sides = {role: _RWSide(judge, role) for role in ("r", "w")}

        def for_thread(k):
            role = roles[k % len(roles)]
            make = write if role == "w" and not cmd.get("writers_read") else read

            def where(_lock):
                return f"{name}:{role}", sides[role]

            where.role = role
            return make, where

        return for_thread, []
    if kind != "semaphore":
        raise ValueError(f"unknown kind {kind!r}")
    sem = rl.semaphore(name, cmd["permits"], cmd["ttl"])
    permit_judges = [Judge(cmd["judge"], f"{name}:p{i}") for i in range(cmd["permits"])]

    def where(permit):
        return f"{name}:p{permit.index}", permit_judges[permit.index], judge

    return (lambda _k: ((lambda: sem), where)), permit_judges


def rwlock_sides(rl, name, ttl, **options):
    """(read, write): functions that make a new read lock and a new write lock of ONE RWLock
    of `name` (rl.rwlock(name, ttl, **options)).  On the async API (`rl` a tests/support/apis.py
    facade of an AsyncRedlock) the AsyncRWLock is made in the facade's event loop and each
    AsyncReadLock / AsyncWriteLock is returned as its LockFacade (the Lock API, its calls run
    in the calling thread's task)."""
    runner = getattr(rl, "_runner", None)
    if runner is None:
        rw = rl.rwlock(name, ttl, **options)
        return rw.read, rw.write
    from apis import _wrap

    rw = runner.run(lambda: rl._target.rwlock(name, ttl, **options))
    return (
        lambda: _wrap(runner, runner.run(rw.read)),
        lambda: _wrap(runner, runner.run(rw.write)),
    )


class _RWSide:
    """One side ("r" or "w") of a read-write lock's judge (faults.oracles.RWJudge): its
    section() is the critical section of a reader or a writer."""

    def __init__(self, judge, role: str) -> None:
        self.judge = judge
        self.role = role

    def section(self, rng, cs_ms, me) -> dict:
        """Enter (both occupancies judged in one step); a writer updates the lost-update
        counter, a reader reads it on entry and exit (a change is a torn read); exit."""
        writers, readers, bad = self.judge.enter(self.role, me)
        value = self.judge.read_counter()
        time.sleep(rng.uniform(*cs_ms) / 1000.0)
        if self.role == "w":
            self.judge.write_counter(value + 1)
        elif self.judge.read_counter() != value:
            self.judge.torn_read()
        self.judge.exit(self.role)
        return {"writers": writers, "readers": readers, "violation": bad}


def contend(cmd) -> dict:
    """The "contend" command: `threads` (default 1) threads (on api "async": tasks) each run
    _contend_loop, sharing the worker's client; one result for the worker."""
    import threading

    from faults.oracles import Judge, RWJudge

    me = f"{cmd.get('label', 'w')}:{os.getpid()}"
    if cmd.get("kind") == "rwlock":
        judge = RWJudge(cmd["judge"], cmd["name"])
    else:
        judge = Judge(cmd["judge"], cmd["name"], limit=cmd.get("limit", 1))
    rl, end = _redlock(cmd)
    out = {
        "label": me,
        "client": type(getattr(rl, "_target", rl)).__name__,  # Redlock or AsyncRedlock
        # the module of its event loop's class (asyncio... or uvloop), or None for Redlock
        "loop": type(rl._runner.loop).__module__ if hasattr(rl, "_runner") else None,
        "calls": [],  # [start_ns, duration_ns, outcome]
        "intervals": [],
        "escaped": [],
        "errors": {},
        "release_errors": {},
        "occupancy_seen": 0,
        "fence_refused": 0,
        "rss": [],
        "lost_mid_section": 0,
        "requests": [],  # kind "fair": [requested_ns, done_ns, granted, who, seq] (time_ns)
    }
    threads = cmd.get("threads", 1)
    parts = [
        {k: type(v)() for k, v in out.items() if isinstance(v, (list, dict, int))}
        for _ in range(threads)
    ]
    judges = [judge]
    failed: list = []
    try:
        for_thread, more = _holders(rl, cmd, judge)
        judges += more
        start_at = cmd.get("start_at_ns", 0)
        while time.monotonic_ns() < start_at:
            time.sleep(max(0.0, (start_at - time.monotonic_ns()) / 1e9))
        calls = cmd.get("calls")
        if threads == 1:
            make, where = for_thread(0)
            _contend_loop(cmd, make, where, parts[0], random.Random(cmd.get("seed")), me, calls)
        else:
            runners = [
                threading.Thread(
                    target=_catching(_contend_loop, failed),
                    args=(cmd, *for_thread(k), parts[k], random.Random(f"{cmd.get('seed')}:{k}")),
                    kwargs={
                        "me": f"{me}.{k}",
                        "calls": _share(calls, threads, k),
                        "rss_every": 0 if k else cmd.get("rss_every", 0),
                    },
                )
                for k in range(threads)
            ]
            for t in runners:
                t.start()
            for t in runners:
                t.join()
            if failed:
                raise failed[0]
    finally:
        for part in parts:
            for k, v in part.items():
                if isinstance(v, list):
                    out[k].extend(v)
                elif isinstance(v, dict):
                    for key, items in v.items():
                        out[k].setdefault(key, []).extend(items)
                else:
                    out[k] += v
        out["rss"].append([sum(len(p["calls"]) for p in parts), _rss_kb()])
        _close(rl, end)
        for j in judges:
            j.close()
    return out


def _share(calls, threads: int, k: int):
    """Thread k's share of `calls` (None: no count, a deadline)."""
    return None if calls is None else calls // threads + (k < calls % threads)


def _catching(fn, failed: list):
    """fn, keeping what it raises in `failed` (for a thread's caller to raise)."""

    def run(*args, **kwargs):
        try:
            fn(*args, **kwargs)
        except BaseException as exc:
            failed.append(exc)

    return run


def _contend_loop(cmd, make, where, out, rng, me, calls, rss_every=None) -> None:
    """acquire(timeout=...) in a loop (`calls` of them, or until the command's "until_ns"), each
    success followed by the critical section; outcomes, intervals and errors go to `out` (a
    read-write lock's calls carry the holder's role, "r" or "w", as a fourth item)."""
    import hiredlock

    until_ns = cmd.get("until_ns")
    timeout = cmd.get("acquire_timeout", 2.0)
    cs_ms = tuple(cmd.get("cs_ms", (1, 5)))
    n = 0
    rss_every = cmd.get("rss_every", 0) if rss_every is None else rss_every
    side = [where.role] if hasattr(where, "role") else []  # a read-write lock's role
    gate = getattr(where, "gate", None)  # a fair lock's RequestGate
    while True:
        if calls is not None and n >= calls:
            break
        if until_ns is not None and time.monotonic_ns() >= until_ns:
            break
        n += 1
        if rss_every and n % rss_every == 0:
            out["rss"].append([n, _rss_kb()])
        holder = make()
        if gate is not None:
            seq = gate.wait()
            requested_ns = time.time_ns()  # (the clock a fair lock orders its calls by)
        t0 = time.monotonic_ns()
        try:
            got = holder.acquire(timeout=timeout)  # a Lock's True/False, a Permit or None
            ok = got is not None and got is not False
            outcome = "ok" if ok else "false"
            if not ok:
                errs = out["errors"].setdefault("false", [])
                if len(errs) < 5:
                    errs.append(_votes(type("V", (), {"votes": holder.last_votes})()))
        except hiredlock.HiredlockError as exc:
            ok, outcome = False, type(exc).__name__
            errs = out["errors"].setdefault(outcome, [])
            if len(errs) < 5:
                errs.append(_votes(exc))
        except Exception as exc:  # must never happen: only typed errors may escape
            ok, outcome = False, "escaped"
            out["escaped"].append(f"acquire: {exc!r}\n{traceback.format_exc()[-1500:]}")
        t1 = time.monotonic_ns()
        if gate is not None:
            out["requests"].append([requested_ns, time.time_ns(), ok, me, seq])
        out["calls"].append([t0, t1 - t0, outcome, *side])
        if not ok:
            continue
        lock = holder if got is True else got
        acquired_at = t1
        valid_until = acquired_at + int(lock.validity * 1e9)
        token, fence = lock.token, lock.fence
        name, judge, *outer = where(lock)
        if isinstance(judge, _RWSide):
            cs = judge.section(rng, cs_ms, me)
            over = cs["violation"]
        else:
            cs = _critical_section(judge, rng, cs_ms, fence, me, *outer)
            over = cs["occ"] > 1 or (outer and cs["outer_occ"] > outer[0].limit)
        if over:
            out["occupancy_seen"] += 1
        if cs.get("fence_accepted") is False:
            out["fence_refused"] += 1
        released_at = time.monotonic_ns()
        if released_at > valid_until:
            out["lost_mid_section"] += 1
        out["intervals"].append([name, token, me, acquired_at, valid_until, released_at, fence])
        try:
            lock.release()
        except hiredlock.HiredlockError as exc:
            errs = out["release_errors"].setdefault(type(exc).__name__, [])
            if len(errs) < 5:
                errs.append(_votes(exc))
            else:
                errs.append("")
        except Exception as exc:
            out["escaped"].append(f"release: {exc!r}\n{traceback.format_exc()[-1500:]}")


def hold(cmd) -> dict:
    """Acquire, enter the section, report, wait for "go" (stopped meanwhile), finish."""
    import hiredlock
    from faults.oracles import Judge

    me = f"{cmd.get('label', 'h')}:{os.getpid()}"
    judge = Judge(cmd["judge"], cmd["name"])
    rl, end = _redlock(cmd)
    out = {"label": me, "escaped": []}
    try:
        lock = rl.lock(cmd["name"], cmd["ttl"], fencing=bool(cmd.get("fencing")))
        if not lock.acquire(timeout=cmd.get("acquire_timeout", 5)):
            out["acquired"] = False
            return out
        acquired_at = time.monotonic_ns()
        valid_until = acquired_at + int(lock.validity * 1e9)
        out["acquired"] = True
        occ = judge.enter()
        value = judge.read_counter()
        _emit({"event": "in_cs", "fence": lock.fence, "occ": occ})
        line = sys.stdin.readline()
        assert json.loads(line)["op"] == "go", line
        out["resumed_at"] = time.monotonic_ns()
        judge.write_counter(value + 1)
        out["fence"] = lock.fence
        out["fence_accepted"] = (
            judge.fenced_write(lock.fence, me) if lock.fence is not None else None
        )
        judge.exit()
        released_at = time.monotonic_ns()
        out["interval"] = [
            cmd["name"],
            lock.token,
            me,
            acquired_at,
            valid_until,
            released_at,
            lock.fence,
        ]
        try:
            lock.release()
            out["release"] = "ok"
        except hiredlock.HiredlockError as exc:
            out["release"] = type(exc).__name__
        except Exception as exc:
            out["escaped"].append(repr(exc))
    finally:
        _close(rl, end)
        judge.close()
    return out


def _emit(obj) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _main() -> int:
    _emit({"event": "ready", "pid": os.getpid()})
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd.get("op")
        if op == "exit":
            return 0
        try:
            if op == "contend":
                res = contend(cmd)
            elif op == "hold":
                res = hold(cmd)
            else:
                raise ValueError(f"unknown op {op!r}")
            path = cmd.get("results_path")
            if path:
                with open(path, "w") as f:
                    json.dump(res, f)
                res = {"results_path": path}
            _emit({"event": "done", "ok": True, "result": res})
        except Exception:
            _emit({"event": "done", "ok": False, "error": traceback.format_exc()[-3000:]})
    return 0


# -- the pool (in the test process) ---------------------------------------------------------------


def _pdeathsig() -> None:
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


class WorkerError(RuntimeError):
    pass


class Worker:
    def __init__(self, index: int) -> None:
        self.index = index
        env = {k: v for k, v in os.environ.items() if k != "HIREDLOCK_IMPL"}
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            preexec_fn=_pdeathsig,
        )
        self._buf = b""

    @property
    def pid(self) -> int:
        return self.proc.pid

    def send(self, obj) -> None:
        self.proc.stdin.write((json.dumps(obj) + "\n").encode())
        self.proc.stdin.flush()

    def read(self, timeout: float) -> dict:
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WorkerError(
                    f"worker {self.index} (pid {self.pid}) did not answer in {timeout}s"
                )
            r, _, _ = select.select([fd], [], [], left)
            if not r:
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                err = b""
                with contextlib.suppress(Exception):
                    err = self.proc.stderr.read()
                raise WorkerError(
                    f"worker {self.index} (pid {self.pid}) exited: "
                    f"{err.decode(errors='replace')[-3000:]}"
                )
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def result(self, timeout: float) -> dict:
        msg = self.read(timeout)
        if msg.get("event") != "done":
            raise WorkerError(f"worker {self.index}: unexpected {msg}")
        if not msg["ok"]:
            raise WorkerError(f"worker {self.index} failed:\n{msg['error']}")
        res = msg["result"]
        if "results_path" in res:
            with open(res["results_path"]) as f:
                res = json.load(f)
        return res

    def kill(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            with contextlib.suppress(Exception):
                f.close()


class WorkerPool:
    def __init__(self, n: int) -> None:
        self.workers: list[Worker] = []
        try:
            for i in range(n):
                self.workers.append(Worker(i))
            for w in self.workers:
                msg = w.read(timeout=60)
                assert msg.get("event") == "ready", msg
        except BaseException:
            self.close()
            raise

    def __len__(self) -> int:
        return len(self.workers)

    def __getitem__(self, i: int) -> Worker:
        return self.workers[i]

    def healthy(self) -> bool:
        return all(w.proc.poll() is None for w in self.workers)

    def contend(self, cmds: list[dict], timeout: float) -> list[dict]:
        for w, cmd in zip(self.workers, cmds):
            w.send({"op": "contend", **cmd})
        return [w.result(timeout) for w, _ in zip(self.workers, cmds)]

    def close(self) -> None:
        for w in self.workers:
            w.kill()


if __name__ == "__main__":
    sys.exit(_main())
