"""A local Redis Cluster for the tests: 3 primaries with 1 replica each, six real redis-server
processes (servers.RedisServer, so started on free ports and stopped by pid, never by name),
joined by `redis-cli --cluster create ... --cluster-replicas 1 --cluster-yes`.

* Every node: --cluster-enabled yes, its cluster bus on a free port of its own (--cluster-port;
  the default, port + 10000, may be taken or out of range), its nodes.conf in its own directory,
  --cluster-node-timeout 1000 (a dead primary is failed over in a few seconds), replicas that
  always try to take over (--cluster-replica-validity-factor 0) and sync at once
  (--repl-diskless-sync-delay 0).
* The cli is the one next to the server binary: HIREDLOCK_TEST_REDIS_SERVER pointing at a
  valkey-server takes the valkey-cli beside it (redis-cli beside a redis-server).
* Waiting on the cluster (ready(), a promotion) polls with a deadline: these wait for the nodes'
  gossip, there is nothing to synchronise on.

`whole_cluster_server()`: one cluster-mode server serving every slot.

Helpers for the tests that break a cluster (give those a cluster of their own):
`kill_primary(node)` + `wait_for_promotion(...)`, and `SlotMigration` (a slot moved from one
primary to another step by step, so a test can act between the steps and see ASK, then MOVED).
"""

from __future__ import annotations

import subprocess
import time
import urllib.parse

import pytest
import redis
import servers
from servers import RedisServer, ServerTls, free_port

NODE_TIMEOUT_MS = 1000
# A fresh cluster's gossip and a failover after NODE_TIMEOUT_MS both take seconds; on a loaded
# 2-core machine, allow many times that.
READY_TIMEOUT = 60.0


def whole_cluster_server() -> RedisServer:
    """One redis-server in cluster mode serving every slot, ready (cluster_state:ok): given to
    the library as a plain master, it refuses a script whose keys are in several slots
    (CROSSSLOT), as any cluster does."""
    server = RedisServer(
        extra_args=("--cluster-enabled", "yes", "--cluster-port", str(free_port()))
    )
    admin = server.admin()
    admin.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 16383)
    deadline = time.monotonic() + 10
    while b"cluster_state:ok" not in admin.execute_command("CLUSTER", "INFO"):
        assert time.monotonic() < deadline, "the cluster-mode server never said cluster_state:ok"
        time.sleep(0.05)
    return server


def cli_binary() -> str:
    """redis-cli (or valkey-cli) beside the server binary the tests use, else the one on PATH
    (servers.find_server chooses it)."""
    server = servers.require_redis_server()
    if servers.REDIS_CLI is None:
        raise servers.RedisServerMissing(f"no redis-cli or valkey-cli beside {server} nor on PATH")
    return servers.REDIS_CLI


def node_args(extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    return (
        "--cluster-enabled",
        "yes",
        "--cluster-port",
        str(free_port()),
        "--cluster-config-file",
        "nodes.conf",  # (relative to the node's own --dir)
        "--cluster-node-timeout",
        str(NODE_TIMEOUT_MS),
        "--cluster-replica-validity-factor",
        "0",
        "--repl-diskless-sync-delay",
        "0",
        *extra,
    )


def _text(value: object) -> object:
    return value.decode() if isinstance(value, bytes) else value


def is_primary(srv: RedisServer) -> bool:
    """What ROLE says (a fork may say primary)."""
    return _text(srv.admin().execute_command("ROLE")[0]) in ("master", "primary")


def _pairs(raw) -> dict:
    """A RESP2 flat [key, value, ...] list (or a dict redis-py already made of one) as a dict."""
    items = raw.items() if isinstance(raw, dict) else zip(raw[::2], raw[1::2])
    return {_text(key): value for key, value in items}


def shards_of(client: redis.Redis) -> list[dict]:
    """CLUSTER SHARDS as plain dicts: {"slots": [(start, end), ...], "nodes": [{...}, ...]}."""
    shards = []
    for raw in client.execute_command("CLUSTER", "SHARDS"):
        shard = _pairs(raw)
        slots = [int(x) for x in shard["slots"]]
        nodes = [
            {key: _text(value) for key, value in _pairs(node).items()} for node in shard["nodes"]
        ]
        shards.append({"slots": list(zip(slots[::2], slots[1::2])), "nodes": nodes})
    return shards


class Cluster:
    """Six nodes, three primaries with a replica each. `servers`: the six RedisServers in start
    order; the roles move with failovers (primaries() asks the cluster)."""

    def __init__(
        self,
        *,
        primaries: int = 3,
        replicas: int = 1,
        extra_args: tuple[str, ...] = (),
        tls: ServerTls | None = None,
    ):
        self.tls = tls
        self.password: str | None = None
        self.servers: list[RedisServer] = []
        try:
            for _ in range(primaries * (replicas + 1)):
                self.servers.append(RedisServer(extra_args=node_args(extra_args), tls=tls))
            command = [cli_binary(), "--cluster", "create"]
            command += [f"127.0.0.1:{srv.port}" for srv in self.servers]
            command += ["--cluster-replicas", str(replicas), "--cluster-yes"]
            done = subprocess.run(command, capture_output=True, text=True, timeout=READY_TIMEOUT)
            if done.returncode != 0:
                raise RuntimeError(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
            self.ready()
        except BaseException:
            self.cleanup()
            raise

    # -- addresses -------------------------------------------------------------------------
    @property
    def seeds(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", srv.port) for srv in self.servers]

    @property
    def url(self) -> str:
        """redis+cluster://127.0.0.1:p1,127.0.0.1:p2 (two seeds: any node can tell the map)."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{port}" for _, port in self.seeds[:2])

    @property
    def tls_url(self) -> str:
        assert self.tls is not None, "not a TLS cluster"
        ca = urllib.parse.quote(self.tls.ca_file, safe="/")
        seeds = ",".join(f"127.0.0.1:{srv.tls_port}" for srv in self.servers[:2])
        return f"rediss+cluster://{seeds}?ssl_ca_certs={ca}"

    def server_on(self, port: int) -> RedisServer:
        for srv in self.servers:
            if port in (srv.port, srv.tls_port):
                return srv
        raise KeyError(port)

    def live(self) -> list[RedisServer]:
        return [srv for srv in self.servers if srv.alive]

    # -- what the cluster says -------------------------------------------------------------
    def shards(self) -> list[dict]:
        """CLUSTER SHARDS as the first live node reports it."""
        return shards_of(self.live()[0].admin())

    def owners(self) -> dict[int, int]:
        """slot -> the plaintext port of the primary serving it, as CLUSTER SHARDS says."""
        owners = {}
        for shard in self.shards():
            primary = [node for node in shard["nodes"] if node["role"] in ("master", "primary")]
            if not primary or not shard["slots"]:
                continue
            port = int(primary[0]["port"])
            for start, end in shard["slots"]:
                for slot in range(start, end + 1):
                    owners[slot] = port
        return owners

    def primaries(self) -> list[RedisServer]:
        """The live servers that are primaries now (ROLE on each)."""
        return [srv for srv in self.live() if is_primary(srv)]

    def replica_of(self, primary: RedisServer) -> RedisServer:
        node_id = _text(primary.admin().execute_command("CLUSTER", "MYID"))
        for srv in self.live():
            role = srv.admin().execute_command("ROLE")
            if _text(role[0]) in ("slave", "replica") and int(role[2]) == primary.port:
                return srv
        raise LookupError(f"no replica of {primary} ({node_id})")

    def ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Polls until every live node says cluster_state:ok and all 16384 slots are served,
        they agree on the slot owners, and every live replica is synced (master_link_status:up)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                infos = [srv.admin().cluster("info") for srv in self.live()]
                if all(
                    _text(info["cluster_state"]) == "ok" and int(info["cluster_slots_ok"]) == 16384
                    for info in infos
                ):
                    views = {tuple(sorted(self._owner_ids(srv))) for srv in self.live()}
                    synced = all(
                        is_primary(srv)
                        or srv.admin().info("replication")["master_link_status"] == "up"
                        for srv in self.live()
                    )
                    if len(views) == 1 and synced:
                        return
            except redis.RedisError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster is not ready after {timeout} s")
            time.sleep(0.05)

    @staticmethod
    def _owner_ids(srv: RedisServer) -> list[tuple[int, int, str]]:
        ranges = []
        for shard in shards_of(srv.admin()):
            primary = [node for node in shard["nodes"] if node["role"] in ("master", "primary")]
            for start, end in shard["slots"]:
                ranges.append((start, end, primary[0]["id"] if primary else ""))
        return ranges

    # -- faults ----------------------------------------------------------------------------
    def kill_primary(self, primary: RedisServer) -> RedisServer:
        """SIGKILL a primary (by pid); returns its replica, which the cluster will promote."""
        replica = self.replica_of(primary)
        primary.kill()
        return replica

    def wait_for_promotion(self, replica: RedisServer, timeout: float = READY_TIMEOUT) -> None:
        """Polls until `replica` is a primary and the live nodes agree the cluster is ok."""
        deadline = time.monotonic() + timeout
        while not is_primary(replica):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{replica} was not promoted after {timeout} s")
            time.sleep(0.05)
        self.ready(max(1.0, deadline - time.monotonic()))

    def set_password(self, password: str | None) -> None:
        """requirepass (and masterauth, for the replicas) on every live node."""
        for srv in self.live():
            srv.admin().config_set("masterauth", password or "")
            srv.set_password(password)
        self.password = password

    def cleanup(self) -> None:
        for srv in self.servers:
            srv.cleanup()


class SlotMigration:
    """One slot moved from `source` to `target`, step by step: begin() (the target IMPORTING,
    the source MIGRATING: a key already moved answers ASK), move_keys() (MIGRATE each key),
    finish() (SETSLOT NODE on every primary: the source answers MOVED)."""

    def __init__(self, cluster: Cluster, slot: int, source: RedisServer, target: RedisServer):
        self.cluster, self.slot, self.source, self.target = cluster, slot, source, target
        self.source_id = _text(source.admin().execute_command("CLUSTER", "MYID"))
        self.target_id = _text(target.admin().execute_command("CLUSTER", "MYID"))

    def begin(self) -> None:
        self.target.admin().execute_command(
            "CLUSTER", "SETSLOT", self.slot, "IMPORTING", self.source_id
        )
        self.source.admin().execute_command(
            "CLUSTER", "SETSLOT", self.slot, "MIGRATING", self.target_id
        )

    def move_keys(self) -> int:
        moved = 0
        source = self.source.admin()
        while keys := source.execute_command("CLUSTER", "GETKEYSINSLOT", self.slot, 100):
            args = ["MIGRATE", "127.0.0.1", self.target.port, "", 0, 5000]
            if self.cluster.password:
                args += ["AUTH", self.cluster.password]
            source.execute_command(*args, "KEYS", *keys)
            moved += len(keys)
        return moved

    def finish(self) -> None:
        # the target first, then the source, then the others (as redis-cli --cluster does)
        for srv in [self.target, self.source] + [
            srv for srv in self.cluster.primaries() if srv not in (self.target, self.source)
        ]:
            srv.admin().execute_command("CLUSTER", "SETSLOT", self.slot, "NODE", self.target_id)

    def run(self) -> None:
        self.begin()
        self.move_keys()
        self.finish()


# -- fixtures (imported by the test modules that use them) ----------------------------------------


@pytest.fixture(name="cluster", scope="session")
def cluster_fixture(redis_server_bin):
    """The session's cluster: tests must not break it (no kill, no migration, no config)."""
    made = Cluster()
    yield made
    made.cleanup()


@pytest.fixture(name="fresh_cluster")
def fresh_cluster_fixture(redis_server_bin):
    """A cluster of this test's own, to break."""
    made = Cluster()
    yield made
    made.cleanup()
