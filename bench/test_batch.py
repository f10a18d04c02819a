"""A batch of 100 names on N=5: acquire_many then release_many (one round trip per master each)."""

from __future__ import annotations

import pytest
from libs import TTL_S
from timing import bench_rounds

BATCH = 100
N = 5


@pytest.mark.parametrize("engine", ["native", "python"])
def test_batch(benchmark, ports, placement, key_prefix, engine):
    from hiredlock import LockLost, LockNotAcquired, Redlock

    benchmark.group = f"batch of {BATCH} N={N} {placement}"
    names = [f"{key_prefix}:{i}" for i in range(BATCH)]
    redlock = Redlock([f"redis://127.0.0.1:{p}/0" for p in ports[:N]], backend=engine)

    failures: list[str] = []

    def run(k: int) -> None:
        # Names not acquired, or a LockLost from release_many (a round past master_timeout on a
        # busy machine, see libs.HiredlockCycler), are counted; too many of them fail the row.
        for _ in range(k):
            try:
                locks = redlock.acquire_many(names, TTL_S)
            except LockNotAcquired as exc:  # QuorumUnreachable: no name could be had
                failures.append(f"acquire_many: {exc}")
                locks = []
            held = [lock for lock in locks if lock is not None]
            if len(held) < BATCH:
                failures.append(f"acquire_many: {BATCH - len(held)} of {BATCH} not acquired")
            try:
                redlock.release_many(held)
            except LockLost as exc:
                failures.append(f"release_many: {exc}")
            if len(failures) > 10:
                raise AssertionError(f"{len(failures)} failed batches; last: {failures[-1]}")

    try:
        bench_rounds(
            benchmark,
            run,
            BATCH,
            {"kind": "batch", "lib": engine, "n": N, "batch": BATCH, "placement": placement},
        )
        benchmark.extra_info["failures"] = len(failures)
    finally:
        redlock.close()
