"""What a Redis Cluster place costs against a standalone master, in one run on the same machine:
the single acquire+release cycle (one name, its slot's primary) and the batch of 100 names
(acquire_many + release_many: one pipeline per primary, all primaries at once), on both engines.
The cluster is 3 primaries with 1 replica each (--replicas), started here
(tests/support/clusters.py, so real redis-servers on free ports, stopped by pid); the standalone
master is one more redis-server. The two are measured in alternating blocks, so that the machine's
noise falls on both alike.

Not part of `make bench` nor of CI: run it by hand, e.g.

    .venv/bin/python bench/cluster.py --cycles 2000 --batches 200

and it prints one table (µs per cycle, ms per batch, and the ratios cluster / standalone).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(BENCH_DIR), "tests", "support"))

from clusters import Cluster  # noqa: E402
from servers import RedisServer  # noqa: E402

from hiredlock import Redlock  # noqa: E402
from hiredlock._core.slots import key_slot  # noqa: E402

BLOCKS = 10  # alternating blocks per measurement


def cycle_us(client: Redlock, cycles: int, tag: str) -> float:
    names = [f"bench:{tag}:{i % 64}" for i in range(cycles)]
    start = time.perf_counter()
    for name in names:
        lock = client.lock(name, 10)
        if not lock.acquire(blocking=False):
            raise RuntimeError(f"{name} not acquired: {lock.last_votes}")
        lock.release()
    return (time.perf_counter() - start) / cycles * 1e6


def batch_ms(client: Redlock, batches: int, names: list[str]) -> float:
    start = time.perf_counter()
    for _ in range(batches):
        held = client.acquire_many(names, 10)
        if any(lock is None for lock in held):
            raise RuntimeError("a batch name was not acquired")
        client.release_many(held)  # type: ignore[arg-type]
    return (time.perf_counter() - start) / batches * 1e3


def alternate(measure_a, measure_b) -> tuple[float, float, float]:
    """Median of A, of B, and of the per-block ratio B / A, over BLOCKS alternating blocks."""
    a_values, b_values, ratios = [], [], []
    for _ in range(BLOCKS):
        a = measure_a()
        b = measure_b()
        a_values.append(a)
        b_values.append(b)
        ratios.append(b / a)
    return statistics.median(a_values), statistics.median(b_values), statistics.median(ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=2000, help="cycles per measurement")
    parser.add_argument("--batches", type=int, default=200, help="batches per measurement")
    parser.add_argument(
        "--replicas", type=int, default=1, help="replicas per primary (0: the primaries alone)"
    )
    args = parser.parse_args()
    cycles = max(1, args.cycles // BLOCKS)
    batches = max(1, args.batches // BLOCKS)
    cluster = Cluster(replicas=args.replicas)
    standalone = RedisServer()
    try:
        owners = cluster.owners()
        names = [f"batch:{i}" for i in range(100)]
        per_node: dict[int, int] = {}
        for name in names:
            port = owners[key_slot(name.encode())]
            per_node[port] = per_node.get(port, 0) + 1
        rows = []
        for engine in ("native", "python"):
            alone = Redlock([standalone.url], backend=engine)
            spread = Redlock([cluster.url], backend=engine)
            try:
                cycle_us(alone, 100, "warm")
                cycle_us(spread, 100, "warm")  # (connections to every primary, the slot map)
                batch_ms(spread, 2, names)
                one = alternate(
                    lambda c=alone: cycle_us(c, cycles, "a"),
                    lambda c=spread: cycle_us(c, cycles, "c"),
                )
                many = alternate(
                    lambda c=alone: batch_ms(c, batches, names),
                    lambda c=spread: batch_ms(c, batches, names),
                )
            finally:
                alone.close()
                spread.close()
            rows.append((engine, "cycle, µs", *one))
            rows.append((engine, "batch of 100, ms", *many))
        print(f"names per primary in the batch: {sorted(per_node.values())}")
        print(
            f"{'engine':8} {'what':18} {'standalone':>11} {'cluster':>9} {'cluster/standalone':>19}"
        )
        for engine, what, a, b, ratio in rows:
            print(f"{engine:8} {what:18} {a:11.1f} {b:9.1f} {ratio:19.2f}")
    finally:
        standalone.cleanup()
        cluster.cleanup()


if __name__ == "__main__":
    main()
