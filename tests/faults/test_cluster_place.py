"""Fault injection, tier 1, with a Redis Cluster as one of three places (faults.cluster_place):
every tier-1 fault applied to the whole cluster (all three of its nodes) while the two standalone
masters make the quorum, on both engines and both APIs. The sync tier's minority scenario shape:
uncontended acquisitions (one client, fresh names) and contended ones (the worker processes on one
name), at least 99% of them succeed, every oracle reports 0 violations, the leak scan (of the
cluster's nodes too) is clean, each uncontended acquire returns within the per-master timeout +
20 ms, and the degraded events name the cluster place only."""

from __future__ import annotations

import pytest

from faults.cluster_place import CLUSTER_PLACE, ClusterPlaceMasters
from faults.masters import TIER1_FAULTS
from faults.scenario import Scenario

pytest_plugins = ["faults.plugin"]

UNCONTENDED = 100
CONTENDED = 100
DEGRADING = ("kill", "sigstop", "drop_replies")  # (as in test_minority: failing for certain)


@pytest.fixture(scope="module")
def fault_masters(redis_server_bin):
    """The lab's masters for this module: a cluster and two standalone masters."""
    masters = ClusterPlaceMasters()
    yield masters
    masters.cleanup()


@pytest.fixture(params=["sync", "async"])
def fault_api(request) -> str:
    return request.param


@pytest.mark.parametrize("fault", TIER1_FAULTS, ids=lambda f: f.kind)
def test_a_cluster_place_faulted(engine, lab, fault, fault_api):
    scn = Scenario(
        f"cluster place {fault} on 1/3 places",
        engine,
        lab,
        fault=fault,
        faulted=CLUSTER_PLACE,
        faulted_places=[0],
    )
    with scn:
        scn.uncontended(UNCONTENDED)
        scn.contended(CONTENDED)
    scn.check_tier1_minority()
    if fault.kind in DEGRADING:
        scn.check_degraded()


def test_the_places_are_a_cluster_and_two_masters(lab):
    """The lab is what the scenarios above claim: a cluster URL first, through the proxy too,
    and every node announcing its proxy listener (else a network fault would miss the nodes a
    client is sent to by the slot map)."""
    direct, proxied = lab.masters.urls("direct"), lab.masters.urls("proxy")
    assert direct[0].startswith("redis+cluster://") and proxied[0].startswith("redis+cluster://")
    assert all(url.startswith("redis://") for url in direct[1:] + proxied[1:])
    announced = lab.masters.cluster.owners().values()
    assert set(announced) == {lab.masters.proxy.ports[i] for i in CLUSTER_PLACE}
