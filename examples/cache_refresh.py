"""A cache that many readers use and one writer refreshes now and then (a read-write lock): readers
share it, a refresh waits for them and keeps them out until it is done, so nobody reads a cache
that is half rewritten.

    HIREDLOCK_MASTERS=redis://10.0.0.1:6379/0,... python cache_refresh.py

The cache is a file (on storage the machines share); here threads stand for the readers on
several machines, and one refresher rewrites the file in two steps.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from pathlib import Path

from hiredlock import Redlock

MASTERS = os.environ["HIREDLOCK_MASTERS"].split(",")


def refresh(cache: Path, version: int) -> None:
    """Rewrites the cache in two steps: between them, the file is not a valid cache."""
    cache.write_text(json.dumps({"version": version, "prices": None}))
    cache.write_text(
        json.dumps({"version": version, "prices": {"tea": version, "coffee": version}})
    )


def main() -> None:
    cache = Path(tempfile.mkdtemp()) / "prices.json"
    refresh(cache, 0)
    seen: list[int] = []
    done = threading.Event()
    with Redlock(MASTERS) as redlock:
        rw = redlock.rwlock("prices-cache", ttl=30)

        def reader() -> None:
            while not done.is_set():
                with rw.read():  # many readers at a time, never during a refresh
                    prices = json.loads(cache.read_text())
                assert prices["prices"] is not None, "read a half-written cache"
                seen.append(prices["version"])

        readers = [threading.Thread(target=reader) for _ in range(4)]
        for thread in readers:
            thread.start()
        for version in range(1, 6):
            with rw.write():  # waits for the readers inside, keeps new ones out
                refresh(cache, version)
        done.set()
        for thread in readers:
            thread.join()
    print(f"{len(seen)} reads, cache versions seen: {sorted(set(seen))}")


if __name__ == "__main__":
    main()
