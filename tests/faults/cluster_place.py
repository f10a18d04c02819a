"""The fault lab with a Redis Cluster as one of its places: three places, place 0 a cluster of
three primaries (support/clusters.py, no replica: a place down is the whole cluster down, which a
replica would not change), places 1 and 2 standalone masters.

    masters = ClusterPlaceMasters()
    masters.servers                # the cluster's 3 nodes, then the 2 standalone masters
    masters.urls("direct")         # [redis+cluster://..., redis://m1, redis://m2]
    masters.urls("proxy")          # the same places through the fault proxy

Faults are by server, as FaultyMasters' are: faulting servers 0, 1 and 2 takes the whole cluster
place down. Each cluster node announces its proxy listener's port (cluster-announce-port; the bus
port stays its own), so the slot map and the MOVED replies send a client to the nodes through the
proxy: the network faults (latency, blackhole, reset, lost replies) reach a cluster's nodes as they
reach a standalone master. The process faults reach the nodes themselves (the proxy passes).
"""

from __future__ import annotations

import time

from clusters import Cluster, shards_of
from servers import RedisServer

from .masters import FaultyMasters

CLUSTER_NODES = 3
CLUSTER_PLACE = list(range(CLUSTER_NODES))  # the server indices of the cluster place
ANNOUNCED_TIMEOUT_S = 60.0  # gossip on a loaded machine


class ClusterPlaceMasters(FaultyMasters):
    def __init__(self) -> None:
        self.cluster = Cluster(primaries=CLUSTER_NODES, replicas=0)
        try:
            standalone = [RedisServer(), RedisServer()]
        except BaseException:
            self.cluster.cleanup()
            raise
        super().__init__(servers=[*self.cluster.servers, *standalone])
        self._announce_proxy_ports()

    def urls(self, via: str = "direct", idx=None) -> list[str]:
        assert idx is None, "the places are one cluster and two masters: all of them"
        nodes = [self.proxy.ports[i] if via == "proxy" else self.servers[i].port for i in (0, 1)]
        cluster = "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for port in nodes)
        return [cluster, *super().urls(via, range(CLUSTER_NODES, len(self.servers)))]

    def _announce_proxy_ports(self) -> None:
        """Each node announces its proxy listener's port; returns once every node's slot map says
        so."""
        for i in CLUSTER_PLACE:
            self.admin(i).config_set("cluster-announce-port", self.proxy.ports[i])
        self._wait_announced()

    def _wait_announced(self) -> None:
        """Returns once every live node's slot map names the nodes by their proxy ports."""
        wanted = {self.proxy.ports[i] for i in CLUSTER_PLACE}
        deadline = time.monotonic() + ANNOUNCED_TIMEOUT_S
        while True:
            seen = [
                {int(node["port"]) for shard in shards_of(self.admin(i)) for node in shard["nodes"]}
                for i in CLUSTER_PLACE
                if self.servers[i].alive
            ]
            if all(ports == wanted for ports in seen):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the nodes announce {seen}, not the proxy ports {wanted}")
            time.sleep(0.05)

    def _restart(self, i: int, delay: float) -> None:
        super()._restart(i, delay)
        if i in CLUSTER_PLACE:
            # (a restarted node announces its own port until told again)
            self.admin(i).config_set("cluster-announce-port", self.proxy.ports[i])

    def heal(self) -> None:
        super().heal()
        self.cluster.ready()
        self._wait_announced()
