"""The handoff benchmark's worker (bench/test_handoff.py runs it): W waiters in this one process
contend for ONE lock name, and every acquisition is recorded, so that the time each release takes
to reach the next holder can be computed afterwards. Prints one JSON line (the summary).

Each waiter (a thread of this process, or for the asyncio rows a task of one event loop) loops:
blocking acquire (the library's own waiting: polling, BLPOP or hiredlock's release notices), hold
for `hold_ms` (time.sleep; asyncio.sleep for tasks), take t_release_called = monotonic_ns() and
call release(), then think for uniform(0, think_ms) before the next acquire, so that the releaser
does not always win its own lock back. Each acquisition appends (t_acquired, t_release_called,
waiter) to one shared list under a lock; t_acquired is monotonic_ns() as soon as acquire()
returned True.

Handoff latency, computed after the run (`summarize`): sort the acquisitions by t_acquired; for
every acquisition but the first of the run, latency = its t_acquired - the previous
acquisition's t_release_called (from the moment the previous holder called release() to the
moment acquire() returned in whichever waiter got the lock next, the releaser included). Only
acquisitions that returned inside the measured window count (after `warmup_s`, before the end);
acquisitions while the waiters drain at the end are "late" and left out. The same latency is also
summarized over the handoffs to ANOTHER waiter only (other_p50_ms, other_p99_ms): a polling lock
is mostly taken back by its own releaser (after its think time), which hides how long the others
wait.

An exception from acquire or release (on a busy machine a hiredlock round past master_timeout
raises QuorumUnreachable or LockLost; pottery may raise too) is counted by type and the loop goes
on. Every client is closed before the summary is printed.

    python handoff_worker.py '{"row": "native", "ports": [...], "name": "...", "seconds": 8,
        "warmup_s": 0.5, "waiters": 8, "hold_ms": 1, "think_ms": 2, "ttl_s": 10, "seed": 1}'

Optional: "start_at" (time.time() at which the waiters start: several processes together) and
"events_out" (a file for the acquisitions and the window, which bench/test_herd.py merges).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import random
import sys
import threading
import time
from collections import Counter

HOST = "127.0.0.1"

# row -> (api, library, N, wake): wake None = the library's default (hiredlock: waking on; the
# `wake` argument is not passed), False = `wake=False` passed (hiredlock's timer-only polling).
ROWS = {
    "native": ("sync", "hiredlock-native", 5, None),
    "native-nowake": ("sync", "hiredlock-native", 5, False),
    "python": ("sync", "hiredlock-python", 5, None),
    "python-redis-lock": ("sync", "python-redis-lock", 1, None),
    "redis-py": ("sync", "redis-py", 1, None),
    "pottery": ("sync", "pottery", 5, None),
    "aio-native": ("async", "hiredlock-native", 5, None),
    "aio-native-nowake": ("async", "hiredlock-native", 5, False),
    "aio-python": ("async", "hiredlock-python", 5, None),
}


def key_names(row: str, name: str) -> list[str]:
    """The Redis keys a row's lock uses (to check and clean after the run)."""
    lib = ROWS[row][1]
    if lib == "pottery":
        return [f"redlock:{name}"]
    if lib == "python-redis-lock":
        return [f"lock:{name}", f"lock-signal:{name}"]
    return [name]


def wake_kwargs(wake) -> dict:
    return {} if wake is None else {"wake": wake}


# -- the sync libraries: (make_lock() per waiter, acquire(lock) -> bool, release(lock), close()) --


def open_sync(lib: str, ports, name: str, ttl_s: float, wake):
    if lib.startswith("hiredlock-"):
        from hiredlock import Redlock

        backend = lib.split("-", 1)[1]
        rl = Redlock([f"redis://{HOST}:{p}/0" for p in ports], backend=backend, **wake_kwargs(wake))
        try:
            assert rl.backend == backend, rl.backend
            if hasattr(rl, "connect"):
                rl.connect()  # every master's connection up before the clock starts
        except BaseException:
            rl.close()
            raise
        return (
            lambda: rl.lock(name, ttl=ttl_s),
            lambda lock: lock.acquire(),
            lambda lock: lock.release(),
            rl.close,
        )
    from redis import Redis

    clients = [Redis(host=HOST, port=p) for p in ports]
    for c in clients:
        c.ping()
    close = lambda: [c.close() for c in clients]  # noqa: E731
    if lib == "pottery":
        import pottery

        masters = set(clients)
        return (
            lambda: pottery.Redlock(key=name, masters=masters, auto_release_time=ttl_s),
            lambda lock: lock.acquire(),
            lambda lock: lock.release(),
            close,
        )
    (client,) = clients
    if lib == "redis-py":  # polls every `sleep` = 0.1 s (its default)
        return (
            lambda: client.lock(name, timeout=ttl_s),
            lambda lock: lock.acquire(),
            lambda lock: lock.release(),
            close,
        )
    if lib == "python-redis-lock":  # waits in BLPOP on its signal key
        import redis_lock

        return (
            lambda: redis_lock.Lock(client, name, expire=int(ttl_s)),
            lambda lock: lock.acquire(),
            lambda lock: lock.release(),
            close,
        )
    raise SystemExit(f"unknown library {lib!r}")


class Run:
    """The shared state of one run: the acquisitions and the exceptions."""

    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.hold_s = cfg["hold_ms"] / 1000
        self.think_s = cfg["think_ms"] / 1000
        self.events: list[tuple[int, int, int]] = []  # (t_acquired, t_release_called, waiter)
        self.errors: Counter[str] = Counter()
        self.mutex = threading.Lock()
        self.start_ns = self.end_ns = 0

    def record(self, t_acquired: int, t_release: int, waiter: int) -> None:
        with self.mutex:
            self.events.append((t_acquired, t_release, waiter))

    def error(self, what: str, exc: BaseException) -> None:
        with self.mutex:
            self.errors[f"{what}: {type(exc).__name__}"] += 1


def run_sync(cfg: dict, run: Run) -> None:
    _api, lib, _n, wake = ROWS[cfg["row"]]
    make_lock, acquire, release, close = open_sync(
        lib, cfg["ports"], cfg["name"], cfg["ttl_s"], wake
    )
    try:
        locks = [make_lock() for _ in range(cfg["waiters"])]  # one lock object per waiter
        barrier = threading.Barrier(cfg["waiters"] + 1)

        def waiter(i: int) -> None:
            lock, rnd = locks[i], random.Random(cfg["seed"] * 1000 + i)
            barrier.wait()
            while time.monotonic_ns() < run.end_ns:
                try:
                    acquired = acquire(lock)
                except Exception as exc:
                    run.error("acquire", exc)
                    continue
                t_acquired = time.monotonic_ns()
                if not acquired:
                    run.error("acquire", RuntimeError("returned False"))
                    continue
                time.sleep(run.hold_s)
                t_release = time.monotonic_ns()
                try:
                    release(lock)
                except Exception as exc:
                    run.error("release", exc)
                run.record(t_acquired, t_release, i)
                time.sleep(rnd.uniform(0, run.think_s))

        threads = [
            threading.Thread(target=waiter, args=(i,), daemon=True) for i in range(cfg["waiters"])
        ]
        for t in threads:
            t.start()
        wait_for_start(cfg)
        run.start_ns = time.monotonic_ns()
        run.end_ns = run.start_ns + int((cfg["warmup_s"] + cfg["seconds"]) * 1e9)
        barrier.wait()
        for t in threads:
            t.join()
    finally:
        close()


async def run_async(cfg: dict, run: Run) -> None:
    from hiredlock.aio import AsyncRedlock

    _api, lib, _n, wake = ROWS[cfg["row"]]
    backend = lib.split("-", 1)[1]
    masters = [f"redis://{HOST}:{p}/0" for p in cfg["ports"]]
    async with AsyncRedlock(masters, backend=backend, **wake_kwargs(wake)) as rl:
        backend_used = getattr(rl, "backend", backend)
        assert backend_used == backend, backend_used
        if hasattr(rl, "connect"):
            await rl.connect()
        locks = [rl.lock(cfg["name"], ttl=cfg["ttl_s"]) for _ in range(cfg["waiters"])]
        go = asyncio.Event()

        async def waiter(i: int) -> None:
            lock, rnd = locks[i], random.Random(cfg["seed"] * 1000 + i)
            await go.wait()
            while time.monotonic_ns() < run.end_ns:
                try:
                    acquired = await lock.acquire()
                except Exception as exc:
                    run.error("acquire", exc)
                    continue
                t_acquired = time.monotonic_ns()
                if not acquired:
                    run.error("acquire", RuntimeError("returned False"))
                    continue
                await asyncio.sleep(run.hold_s)
                t_release = time.monotonic_ns()
                try:
                    await lock.release()
                except Exception as exc:
                    run.error("release", exc)
                run.record(t_acquired, t_release, i)
                await asyncio.sleep(rnd.uniform(0, run.think_s))

        tasks = [asyncio.ensure_future(waiter(i)) for i in range(cfg["waiters"])]
        try:
            await asyncio.sleep(0.05)  # every task parked on `go`
            await asyncio.sleep(max(0.0, cfg.get("start_at", 0) - time.time()))
            run.start_ns = time.monotonic_ns()
            run.end_ns = run.start_ns + int((cfg["warmup_s"] + cfg["seconds"]) * 1e9)
            go.set()
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*tasks, return_exceptions=True)


def wait_for_start(cfg: dict) -> None:
    """Until cfg["start_at"] (time.time()), when several worker processes start together."""
    time.sleep(max(0.0, cfg.get("start_at", 0) - time.time()))


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest rank: the smallest value with at least q of the values at or below it."""
    return sorted_values[max(0, math.ceil(q * len(sorted_values)) - 1)]


def summarize(events, window_start_ns: int, window_end_ns: int, waiters: int) -> dict:
    """The figures of one run from its acquisitions (see the module's docstring)."""
    events = sorted(events)
    latencies = []  # ms
    others = []  # ms: the handoffs to another waiter than the releaser
    overlaps = 0
    counts = [0] * waiters
    for k, (t_acquired, _t_release, waiter) in enumerate(events):
        if not window_start_ns <= t_acquired <= window_end_ns:
            continue
        counts[waiter] += 1
        if k == 0:
            continue
        _, prev_release, prev_waiter = events[k - 1]
        latency = t_acquired - prev_release
        if latency < 0:  # acquired before the previous holder released: never with a lock
            overlaps += 1
        latencies.append(latency / 1e6)
        if prev_waiter != waiter:
            others.append(latency / 1e6)
    latencies.sort()
    others.sort()
    stats = {
        f"p{int(q * 100)}_ms": percentile(latencies, q) if latencies else None
        for q in (0.5, 0.9, 0.99)
    }
    stats.update(
        {
            f"other_p{int(q * 100)}_ms": percentile(others, q) if others else None
            for q in (0.5, 0.99)
        }
    )
    return {
        "acquisitions": sum(counts),
        "late": sum(1 for e in events if e[0] > window_end_ns),
        "handoffs": len(latencies),
        **stats,
        "max_ms": latencies[-1] if latencies else None,
        "mean_ms": sum(latencies) / len(latencies) if latencies else None,
        "self_handoffs": len(latencies) - len(others),
        "overlaps": overlaps,
        "per_waiter": counts,
    }


def main() -> None:
    cfg = json.loads(sys.argv[1])
    run = Run(cfg)
    cpu0 = os.times()
    if ROWS[cfg["row"]][0] == "async":
        asyncio.run(run_async(cfg, run))
    else:
        run_sync(cfg, run)
    cpu1 = os.times()
    window_start = run.start_ns + int(cfg["warmup_s"] * 1e9)
    out = summarize(run.events, window_start, run.end_ns, cfg["waiters"])
    out["per_s"] = out["acquisitions"] / cfg["seconds"]
    out["errors"] = dict(run.errors)
    out["cpu_s"] = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    if cfg.get("events_out"):  # (several processes' acquisitions, merged by the caller)
        with open(cfg["events_out"], "w") as f:
            json.dump({"events": run.events, "window": [window_start, run.end_ns]}, f)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
