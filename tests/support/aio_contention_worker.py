"""One process of tests/api/test_aio_contention.py: TASKS tasks of one AsyncRedlock contend for one
lock name, each acquiring it once (a blocking acquire) and running a critical section that feeds
the oracles on a judge server, then releasing it.

    python aio_contention_worker.py '<json config>'

The config names the masters, engine, event loop ("asyncio" or "uvloop"), lock name, ttl,
retry_delay, number of tasks, judge url, start time (CLOCK_MONOTONIC ns: the processes start
together) and the file where the results go (JSON).  "use_lock": false runs the sections without
the lock (the negative control of the oracles).  Results:
    acquired      how many tasks' acquire returned True
    overlaps      critical sections that found another one in progress (occupancy INCR > 1)
    intervals     [name, token, holder, acquired_at, valid_until, released_at] per section, for
                  faults.oracles.interval_violations
    errors        what any task raised instead (repr)
    threads       threading.active_count() at the end (the async API starts none)
    loop          the module of the loop that ran (uvloop... or asyncio...)
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
import time


async def contend(cfg: dict) -> dict:
    import redis.asyncio

    from hiredlock.aio import AsyncRedlock

    judge = redis.asyncio.Redis.from_url(cfg["judge"])
    occupancy, counter = cfg["name"] + ":occupancy", cfg["name"] + ":counter"
    me = f"{cfg['label']}:{os.getpid()}"
    out: dict = {"acquired": 0, "overlaps": 0, "intervals": [], "errors": []}
    out["loop"] = type(asyncio.get_running_loop()).__module__  # uvloop's or asyncio's
    async with AsyncRedlock(
        cfg["masters"], backend=cfg["engine"], retry_delay=cfg["retry_delay"]
    ) as rl:

        async def one(i: int) -> None:
            lock = rl.lock(cfg["name"], cfg["ttl"])
            if not cfg.get("use_lock", True):  # the negative control: sections without the lock
                await unlocked_section()
                return
            if not await lock.acquire(blocking=True):
                out["errors"].append(f"task {i}: acquire returned False")
                return
            acquired_at = time.monotonic_ns()
            valid_until = acquired_at + int(lock.validity * 1e9)
            out["acquired"] += 1
            if await judge.incr(occupancy) != 1:
                out["overlaps"] += 1
            value = int(await judge.get(counter) or 0)  # a lost update shows in the count
            await judge.set(counter, value + 1)
            await judge.decr(occupancy)
            released_at = time.monotonic_ns()
            out["intervals"].append(
                [cfg["name"], lock.token, f"{me}:{i}", acquired_at, valid_until, released_at]
            )
            await lock.release()

        async def unlocked_section() -> None:
            if await judge.incr(occupancy) != 1:
                out["overlaps"] += 1
            value = int(await judge.get(counter) or 0)
            await judge.set(counter, value + 1)
            await judge.decr(occupancy)

        delay = (cfg["start_at_ns"] - time.monotonic_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)
        results = await asyncio.gather(
            *(one(i) for i in range(cfg["tasks"])), return_exceptions=True
        )
        out["errors"].extend(repr(r) for r in results if isinstance(r, BaseException))
    await judge.aclose()
    out["threads"] = threading.active_count()
    return out


def main() -> None:
    cfg = json.loads(sys.argv[1])
    if cfg["loop"] == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    else:
        factory = asyncio.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        out = runner.run(contend(cfg))
    with open(cfg["results"], "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
