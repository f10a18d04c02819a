"""Worker for test_mutual_exclusion.py (run as a subprocess; not collected by pytest).

Acquires one lock name `iters` times; under the lock, increments a counter on a separate judge
redis-server non-atomically (GET, then SET), so that two holders at once would lose updates.
Prints one JSON line: successes, failures (acquire returned False/raised), lost (LockLost on
release), and overlaps seen through a judge "holder" key.
"""

import argparse
import json
import os
import sys

import redis

import hiredlock


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--engine", required=True)
    p.add_argument("--judge", required=True)
    p.add_argument("--name", required=True)
    p.add_argument("--iters", type=int, required=True)
    p.add_argument("--ready", required=True, help="fd of a pipe to write one byte to when ready")
    p.add_argument("--go", required=True, help="fd to read one byte from before starting")
    p.add_argument("masters", nargs="+")
    a = p.parse_args()
    judge = redis.Redis.from_url(a.judge, socket_timeout=10)
    me = str(os.getpid()).encode()
    rl = hiredlock.Redlock(a.masters, backend=a.engine, retry_delay=0.005, retry_count=20)
    assert rl.backend == a.engine
    judge.ping()
    os.write(int(a.ready), b"r")
    os.read(int(a.go), 1)
    res = {"successes": 0, "failures": 0, "lost": 0, "overlaps": 0, "errors": []}
    for _ in range(a.iters):
        lock = rl.lock(a.name, 2)
        try:
            ok = lock.acquire(timeout=30)
        except hiredlock.LockNotAcquired as exc:
            res["failures"] += 1
            res["errors"].append(repr(exc)[:300])
            continue
        if not ok:
            res["failures"] += 1
            continue
        res["successes"] += 1
        # critical section: detect overlap and lose updates if there is one
        if not judge.set("holder", me, nx=True):
            res["overlaps"] += 1
        v = int(judge.get("counter") or 0)
        judge.set("counter", v + 1)
        judge.delete("holder")
        try:
            lock.release()
        except hiredlock.LockLost as exc:
            res["lost"] += 1
            res["errors"].append(repr(exc)[:300])
    rl.close()
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
