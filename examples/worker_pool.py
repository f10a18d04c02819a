"""A pool of workers on several machines, at most 3 of which encode at a time (a semaphore): the
encoder licence allows 3 seats, whatever the number of workers.

    HIREDLOCK_MASTERS=redis://10.0.0.1:6379/0,... python worker_pool.py

Here 8 threads stand for the workers; each takes a permit, encodes, and gives it back. A worker
that dies gives its permit back when the ttl runs out.
"""

from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from hiredlock import Redlock

MASTERS = os.environ["HIREDLOCK_MASTERS"].split(",")
SEATS = 3

encoding = 0
most_at_once = 0
count_lock = threading.Lock()


def encode(video: str) -> None:
    global encoding, most_at_once
    with count_lock:
        encoding += 1
        most_at_once = max(most_at_once, encoding)
    time.sleep(0.02)  # the work
    with count_lock:
        encoding -= 1


def main() -> None:
    with Redlock(MASTERS) as redlock:
        seats = redlock.semaphore("encoder-seats", permits=SEATS, ttl=60, blocking_timeout=30)

        def work(video: str) -> None:
            with seats:  # one of the 3 permits, waiting for one to be released
                encode(video)

        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(work, [f"video-{i}.mp4" for i in range(24)]))
    print(f"encoded 24 videos, at most {most_at_once} at a time")
    assert most_at_once <= SEATS, most_at_once


if __name__ == "__main__":
    main()
