"""A Redis Cluster place against a standalone master, in the same run: the single acquire+release
cycle (one name at a time, each on its slot's primary) and the batch of 100 names (acquire_many +
release_many: one pipeline per primary, all primaries at once), on both engines. The cluster is 3
primaries with 1 replica each (tests/support/clusters.py: real redis-servers on free ports, stopped
by pid, on this process's CPUs); the standalone master is the session's first server."""

from __future__ import annotations

import os

import pytest
from clusters import Cluster
from libs import TTL_S
from timing import bench_rounds

BATCH = 100
PLACES = ("standalone", "cluster")


@pytest.fixture(scope="session")
def bench_cluster(recorder, masters):
    made = Cluster()
    try:
        mine = sorted(os.sched_getaffinity(0))
        for srv in made.servers:
            if sorted(os.sched_getaffinity(srv.pid)) != mine:
                raise RuntimeError(f"redis-server :{srv.port} does not run on CPUs {mine}")
        recorder.meta["cluster"] = {
            "nodes": [{"port": srv.port, "pid": srv.pid} for srv in made.servers],
            "primaries": 3,
            "replicas_each": 1,
        }
        yield made
    finally:
        made.cleanup()


def place_url(place: str, cluster: Cluster, ports: list[int]) -> str:
    return cluster.url if place == "cluster" else f"redis://127.0.0.1:{ports[0]}/0"


def names_per_primary(cluster: Cluster, names: list[str]) -> list[int]:
    from hiredlock._core.slots import key_slot

    owners = cluster.owners()
    counts: dict[int, int] = {}
    for name in names:
        port = owners[key_slot(name.encode())]
        counts[port] = counts.get(port, 0) + 1
    return sorted(counts.values())


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("engine", ["native", "python"])
def test_cluster_cycle(benchmark, bench_cluster, ports, placement, key_prefix, engine, place):
    from hiredlock import Redlock

    benchmark.group = f"cluster place cycle {placement}"
    redlock = Redlock([place_url(place, bench_cluster, ports)], backend=engine)
    names = [f"{key_prefix}:{i}" for i in range(64)]  # (spread over the cluster's primaries)
    turn = [0]

    def run(k: int) -> None:
        for _ in range(k):
            turn[0] += 1
            lock = redlock.lock(names[turn[0] % 64], TTL_S)
            if not lock.acquire(blocking=False):
                raise AssertionError(f"not acquired: {lock.last_votes}")
            lock.release()

    try:
        bench_rounds(
            benchmark,
            run,
            1,
            {"kind": f"cycle-{place}", "lib": engine, "n": 1, "placement": placement},
        )
    finally:
        redlock.close()


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("engine", ["native", "python"])
def test_cluster_batch(
    benchmark, bench_cluster, ports, placement, key_prefix, recorder, engine, place
):
    from hiredlock import Redlock

    benchmark.group = f"cluster place batch of {BATCH} {placement}"
    names = [f"{key_prefix}:{i}" for i in range(BATCH)]
    recorder.meta.setdefault("cluster", {})["batch_names_per_primary"] = names_per_primary(
        bench_cluster, names
    )
    redlock = Redlock([place_url(place, bench_cluster, ports)], backend=engine)

    def run(k: int) -> None:
        for _ in range(k):
            held = redlock.acquire_many(names, TTL_S)
            if any(lock is None for lock in held):
                raise AssertionError("a name of the batch was not acquired")
            redlock.release_many(held)  # type: ignore[arg-type]

    try:
        bench_rounds(
            benchmark,
            run,
            BATCH,
            {"kind": f"batch-{place}", "lib": engine, "n": 1, "placement": placement},
        )
    finally:
        redlock.close()
