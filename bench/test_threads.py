"""Threads, each on its own names, sharing one Redlock on N=5: aggregate cycles per second.

The worker threads are started once and wait on a barrier; a round releases them to do k cycles
each and ends when the last one is done, so thread start-up is never timed. One thread through the
same machinery is the baseline of the 4-thread row.
"""

from __future__ import annotations

import threading

import pytest
from libs import TTL_S
from timing import bench_rounds

from hiredlock import LockLost, LockNotAcquired

N = 5


class Workers:
    def __init__(self, redlock, names):
        self.locks = [redlock.lock(name, ttl=TTL_S) for name in names]
        self.start = threading.Barrier(len(names) + 1)
        self.done = threading.Barrier(len(names) + 1)
        self.k = 0
        self.stop = False
        self.errors: list[BaseException] = []
        self.failures: list[str] = []  # list.append is atomic under the GIL
        self.cycles = 0
        self.threads = [
            threading.Thread(target=self._work, args=(lock,), daemon=True) for lock in self.locks
        ]
        for t in self.threads:
            t.start()

    def _work(self, lock) -> None:
        while True:
            self.start.wait()
            if self.stop:
                return
            try:
                for _ in range(self.k):
                    # A failed cycle (a round past master_timeout on a busy machine, see
                    # libs.HiredlockCycler) is counted; too many of them fail the row.
                    try:
                        if not lock.acquire(blocking=False):
                            self.failures.append(f"acquire: {lock.last_votes}")
                            continue
                    except LockNotAcquired as exc:  # QuorumUnreachable
                        self.failures.append(f"acquire: {exc}")
                        continue
                    try:
                        lock.release()
                    except LockLost as exc:
                        self.failures.append(f"release: {exc}")
                self.cycles += self.k  # racy, but only bounds the failure rate below
                if len(self.failures) > max(10, self.cycles // 100):
                    raise AssertionError(f"{len(self.failures)} failed cycles: {self.failures[-1]}")
            except BaseException as exc:
                self.errors.append(exc)
            self.done.wait()

    def run(self, k: int) -> None:
        self.k = k
        self.start.wait()
        self.done.wait()
        if self.errors:
            raise self.errors[0]

    def close(self) -> None:
        self.stop = True
        self.start.wait()
        for t in self.threads:
            t.join()


@pytest.mark.parametrize("threads", [1, 4])
@pytest.mark.parametrize("engine", ["native", "python"])
def test_threads(benchmark, ports, placement, key_prefix, engine, threads):
    from hiredlock import Redlock

    benchmark.group = f"threads N={N} {placement}"
    redlock = Redlock([f"redis://127.0.0.1:{p}/0" for p in ports[:N]], backend=engine)
    workers = Workers(redlock, [f"{key_prefix}:{i}" for i in range(threads)])
    try:
        bench_rounds(
            benchmark,
            workers.run,
            threads,
            {"kind": "threads", "lib": engine, "n": N, "threads": threads, "placement": placement},
            round_s=0.02,  # the two barrier waits of a round are amortised over 20 ms
        )
        benchmark.extra_info["failures"] = len(workers.failures)
    finally:
        workers.close()
        redlock.close()
