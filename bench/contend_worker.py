"""One contending process: for `seconds`, acquire the one shared name (blocking, the library's own
retry policy and defaults), release it at once, count the acquisitions. Prints one JSON line.
An exception from acquire or release (on a busy machine: a round past hiredlock's master_timeout
raises QuorumUnreachable or LockLost) is counted by type, and the loop goes on.

Standalone on purpose: bench/test_contended.py runs it with the hiredlock venv's python, or with
bench/.venv-redlock-ng/bin/python for redlock-ng (which installs a package named `redlock`, as
redlock-py does, so the two cannot share a venv).

    python contend_worker.py '{"lib": "native", "ports": [...], "name": "...", "seconds": 10,
                               "start_at": <time.time() to start at>, "ttl_ms": 10000}'
"""

from __future__ import annotations

import json
import os
import sys
import time

HOST = "127.0.0.1"


def make(lib, ports, name, ttl_ms):
    """(acquire(remaining_s) -> handle or None, release(handle), close())."""
    if lib in ("native", "python"):
        from hiredlock import Redlock

        rl = Redlock([f"redis://{HOST}:{p}/0" for p in ports], backend=lib)
        lock = rl.lock(name, ttl=ttl_ms / 1000)

        def acquire(remaining):
            return lock if lock.acquire(timeout=remaining) else None

        return acquire, lambda lock: lock.release(), rl.close
    if lib == "pottery":
        import pottery
        from redis import Redis

        clients = [Redis(host=HOST, port=p) for p in ports]
        lock = pottery.Redlock(key=name, masters=set(clients), auto_release_time=ttl_ms / 1000)

        def acquire(remaining):
            return lock if lock.acquire(timeout=remaining) else None

        return acquire, lambda lock: lock.release(), lambda: [c.close() for c in clients]
    if lib == "redlock-ng":
        from redlock import Redlock

        rl = Redlock([f"redis://{HOST}:{p}/0" for p in ports])

        def acquire(remaining):  # blocking=True retries until acquired (no deadline of its own)
            return rl.acquire(name, ttl_ms, blocking=True)

        return acquire, rl.release, lambda: None
    raise SystemExit(f"unknown lib {lib!r}")


def main() -> None:
    cfg = json.loads(sys.argv[1])
    acquire, release, close = make(cfg["lib"], cfg["ports"], cfg["name"], cfg["ttl_ms"])
    count = late = 0
    cpu0 = os.times()
    delay = cfg["start_at"] - time.time()
    if delay > 0:
        time.sleep(delay)
    end = time.monotonic() + cfg["seconds"]
    errors: dict[str, int] = {}
    while True:
        remaining = end - time.monotonic()
        if remaining <= 0:
            break
        try:
            handle = acquire(remaining)
        except Exception as exc:  # e.g. QuorumUnreachable after rounds past master_timeout
            key = f"acquire: {type(exc).__name__}"
            errors[key] = errors.get(key, 0) + 1
            continue
        if handle is None:
            continue
        if time.monotonic() <= end:
            count += 1
        else:
            late += 1
        try:
            release(handle)
        except Exception as exc:  # e.g. LockLost: a release round past master_timeout
            key = f"release: {type(exc).__name__}"
            errors[key] = errors.get(key, 0) + 1
    cpu1 = os.times()
    close()
    cpu = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    print(json.dumps({"count": count, "late": late, "cpu_s": cpu, "errors": errors}))


if __name__ == "__main__":
    main()
