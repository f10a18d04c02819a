"""Worker for test_semaphore.py's acceptance test (run as a subprocess; not collected by pytest).

`--workers` threads (api "sync") or tasks (api "async") share one Semaphore of this process and
loop until `--duration` seconds after the go signal: acquire a permit, INCR an occupancy counter
on a separate judge redis-server (and a per-permit-index holder counter), hold briefly, DECR
both, release. Prints one JSON line: successes, failures (no permit within the acquire timeout),
the largest occupancy and per-index holder count seen, lost releases, late holders (validity over
before the DECR: an overlap there would prove nothing) and errors.
"""

import argparse
import asyncio
import json
import os
import sys
import threading
import time

import redis

import hiredlock

HOLD = 0.002  # seconds a holder keeps its permit: long enough for holders to overlap
ACQUIRE_TIMEOUT = 10.0


def new_result():
    return {
        "successes": 0,
        "failures": 0,
        "max_occupancy": 0,
        "max_per_index": 0,
        "indices": [],
        "lost": 0,
        "late": 0,
        "errors": [],
    }


def merge(results):
    out = new_result()
    for r in results:
        for k in ("successes", "failures", "lost", "late"):
            out[k] += r[k]
        out["max_occupancy"] = max(out["max_occupancy"], r["max_occupancy"])
        out["max_per_index"] = max(out["max_per_index"], r["max_per_index"])
        out["indices"] = sorted(set(out["indices"]) | set(r["indices"]))
        out["errors"] += r["errors"]
    return out


def sync_main(a, deadline_after_go):
    judge = redis.Redis.from_url(a.judge, socket_timeout=10)
    judge.ping()
    rl = hiredlock.Redlock(a.masters, backend=a.engine, retry_delay=0.01, retry_count=20)
    assert rl.backend == a.engine
    rl.inspect("hiredlock-tests:open-connections")
    sem = rl.semaphore(a.name, a.permits, a.ttl)
    os.write(int(a.ready), b"r")
    os.read(int(a.go), 1)
    deadline = deadline_after_go()
    results = [new_result() for _ in range(a.workers)]

    def work(res):
        try:
            while time.monotonic() < deadline:
                permit = sem.acquire(timeout=ACQUIRE_TIMEOUT)
                if permit is None:
                    res["failures"] += 1
                    continue
                res["successes"] += 1
                index_key = f"holders:{permit.index}"
                occupancy = judge.incr("occupancy")
                per_index = judge.incr(index_key)
                time.sleep(HOLD)
                if permit.validity <= 0:
                    res["late"] += 1
                judge.decr(index_key)
                judge.decr("occupancy")
                res["max_occupancy"] = max(res["max_occupancy"], occupancy)
                res["max_per_index"] = max(res["max_per_index"], per_index)
                if permit.index not in res["indices"]:
                    res["indices"].append(permit.index)
                try:
                    permit.release()
                except hiredlock.LockLost as exc:
                    res["lost"] += 1
                    res["errors"].append(repr(exc)[:300])
        except BaseException as exc:  # reported to the test
            res["errors"].append("worker crashed: " + repr(exc)[:500])

    threads = [threading.Thread(target=work, args=(r,)) for r in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rl.close()
    return merge(results)


async def async_main(a, deadline_after_go):
    import redis.asyncio

    from hiredlock.aio import AsyncRedlock

    judge = redis.asyncio.Redis.from_url(a.judge, socket_timeout=10)
    await judge.ping()
    rl = AsyncRedlock(a.masters, backend=a.engine, retry_delay=0.01, retry_count=20)
    assert rl.backend == a.engine
    await rl.inspect("hiredlock-tests:open-connections")
    sem = rl.semaphore(a.name, a.permits, a.ttl)
    os.write(int(a.ready), b"r")
    await asyncio.get_running_loop().run_in_executor(None, os.read, int(a.go), 1)
    deadline = deadline_after_go()
    results = [new_result() for _ in range(a.workers)]

    async def work(res):
        try:
            while time.monotonic() < deadline:
                permit = await sem.acquire(timeout=ACQUIRE_TIMEOUT)
                if permit is None:
                    res["failures"] += 1
                    continue
                res["successes"] += 1
                index_key = f"holders:{permit.index}"
                occupancy = await judge.incr("occupancy")
                per_index = await judge.incr(index_key)
                await asyncio.sleep(HOLD)
                if permit.validity <= 0:
                    res["late"] += 1
                await judge.decr(index_key)
                await judge.decr("occupancy")
                res["max_occupancy"] = max(res["max_occupancy"], occupancy)
                res["max_per_index"] = max(res["max_per_index"], per_index)
                if permit.index not in res["indices"]:
                    res["indices"].append(permit.index)
                try:
                    await permit.release()
                except hiredlock.LockLost as exc:
                    res["lost"] += 1
                    res["errors"].append(repr(exc)[:300])
        except BaseException as exc:  # reported to the test
            res["errors"].append("worker crashed: " + repr(exc)[:500])

    await asyncio.gather(*(work(r) for r in results))
    await rl.aclose()
    await judge.aclose()
    return merge(results)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--api", choices=["sync", "async"], required=True)
    p.add_argument("--engine", required=True)
    p.add_argument("--judge", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--permits", type=int, required=True)
    p.add_argument("--ttl", type=float, required=True)
    p.add_argument("--workers", type=int, required=True)
    p.add_argument("--duration", type=float, required=True)
    p.add_argument("--ready", required=True, help="fd of a pipe to write one byte to when ready")
    p.add_argument("--go", required=True, help="fd to read one byte from before starting")
    p.add_argument("masters", nargs="+")
    a = p.parse_args()

    def deadline_after_go():
        return time.monotonic() + a.duration

    if a.api == "sync":
        res = sync_main(a, deadline_after_go)
    else:
        res = asyncio.run(async_main(a, deadline_after_go))
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
