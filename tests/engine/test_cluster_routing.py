"""An engine given a router (a Redis Cluster place's nodes as links of their own) on a real
two-node cluster: each key's command goes only to the node of its slot, the votes count places,
MOVED and ASK are followed within the round, a redirection the engine cannot follow votes ERROR
with the node's reply, and a node that dies fails only the keys it carries. The sync run() and
the event-fed round (begin/drive/finish) alike.

The router here is a small one of the tests' own, with the interface engines consume
(links, columns, n_places, version, assign, redirect), so that the engines' rules are checked
against a cluster whose slot layout the test controls."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Optional

import pytest
import redis
from round_support import DebugSleep
from servers import RedisServer, free_port
from support import wait_until

from hiredlock._core.masters import parse_masters
from hiredlock._core.requests import RunScript, SetNx
from hiredlock._core.scripts import RELEASE, Outcome
from hiredlock._core.slots import SLOTS, key_slot
from hiredlock._engines.routing import MAX_REDIRECTS
from hiredlock._engines.selection import engine_class
from hiredlock.aio._driver import drive

OK = int(Outcome.OK)
TAKEN = int(Outcome.TAKEN)
ERROR = int(Outcome.ERROR)
CONN_ERROR = int(Outcome.CONN_ERROR)
TTL_MS = 30_000
TIMEOUT_MS = 2_000.0
HALF = SLOTS // 2
APIS = ["sync", "events"]


class ClusterPair:
    """Two cluster-mode redis-servers, slots 0-8191 on `a` and 8192-16383 on `b`, started and
    stopped by pid."""

    def __init__(self) -> None:
        self.servers: list[RedisServer] = []
        try:
            for _ in range(2):
                self.servers.append(
                    RedisServer(
                        extra_args=(
                            "--cluster-enabled",
                            "yes",
                            "--cluster-port",
                            str(free_port()),
                            "--cluster-node-timeout",
                            "5000",
                        )
                    )
                )
            a, b = self.admins()
            a.execute_command("CLUSTER", "SET-CONFIG-EPOCH", 1)
            b.execute_command("CLUSTER", "SET-CONFIG-EPOCH", 2)
            a.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, HALF - 1)
            b.execute_command("CLUSTER", "ADDSLOTSRANGE", HALF, SLOTS - 1)
            bus = int(b.config_get("cluster-port")["cluster-port"])
            a.execute_command("CLUSTER", "MEET", "127.0.0.1", self.servers[1].port, bus)
            wait_until(self.ready, 20, "cluster_state:ok on both nodes")
            self.ids = [admin.execute_command("CLUSTER", "MYID").decode() for admin in (a, b)]
        except BaseException:
            self.close()
            raise

    def admins(self):
        return [srv.admin() for srv in self.servers]

    def ready(self) -> bool:
        for admin in self.admins():
            info = admin.execute_command("CLUSTER", "INFO").decode()
            if "cluster_state:ok" not in info or "cluster_known_nodes:2" not in info:
                return False
        return True

    def owner(self, slot: int) -> int:
        """The node serving a slot, as node a's map says."""
        return self.owner_map()[slot]

    def owner_map(self) -> bytearray:
        """The node serving each slot, as node a's map says (one CLUSTER SLOTS)."""
        ports = [srv.port for srv in self.servers]
        owners = bytearray(SLOTS)
        served = 0
        for start, end, primary, *_ in self.servers[0].admin().execute_command("CLUSTER", "SLOTS"):
            owners[start : end + 1] = bytes([ports.index(int(primary[1]))]) * (end + 1 - start)
            served += end + 1 - start
        assert served == SLOTS, f"node a's map serves {served} slots of {SLOTS}"
        return owners

    def get(self, node: int, key: bytes) -> Optional[bytes]:
        """The key's value on one node (ASKING first: the slot may be importing there); None
        also where the node does not serve the key's slot."""
        client = self.servers[node].admin()
        pipe = client.pipeline(transaction=False)
        pipe.execute_command("ASKING")
        pipe.execute_command("GET", key)
        try:
            return pipe.execute()[1]
        except redis.exceptions.MovedError:
            return None

    def calls(self, node: int, command: str) -> int:
        """How often a node ran a command since its last CONFIG RESETSTAT."""
        stats = self.servers[node].admin().info("commandstats")
        return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))

    def close(self) -> None:
        for srv in self.servers:
            srv.cleanup()


class SlotRouter:
    """The routing interface engines consume, over a ClusterPair (place 0) and optionally a
    standalone server (place 1): keys go to the node the router's own slot map names (which a
    test may get wrong on purpose), and a redirection names the node in the reply, or where
    `redirect_to` says."""

    def __init__(self, pair: ClusterPair, standalone=None, extra_ports: Sequence[int] = ()):
        ports = [srv.port for srv in pair.servers] + list(extra_ports)
        urls = [f"redis://127.0.0.1:{port}" for port in ports]
        self.n_nodes = len(ports)
        self.ports = ports
        self.columns = (0,) * len(ports)
        if standalone is not None:
            urls.append(standalone.url)
            self.columns += (1,)
        self.links = tuple(parse_masters(urls))
        self.n_places = max(self.columns) + 1
        self.version = 1
        self.owners = pair.owner_map()
        self.seen: list[tuple[int, str]] = []
        self.failures: list[int] = []
        self.redirect_to: Optional[int] = None

    def assign(self, keys: Sequence[bytes]) -> tuple[Optional[tuple[int, ...]], ...]:
        shares: list[list[int]] = [[] for _ in range(self.n_nodes)]
        for index, key in enumerate(keys):
            shares[self.owners[key_slot(key)]].append(index)
        standalone = (None,) * (len(self.links) - self.n_nodes)
        return tuple(tuple(share) for share in shares) + standalone

    def failed(self, link: int) -> None:
        """A link's connection failed (the engines' policy tells the router)."""
        self.failures.append(link)

    def redirect(self, link: int, text: str) -> Optional[tuple[int, bool]]:
        self.seen.append((link, text))
        kind, slot, address = text.split()
        port = int(address.rsplit(":", 1)[1])
        target = self.ports.index(port) if port in self.ports else None
        if kind == "MOVED" and target is not None:
            self.owners[int(slot)] = target
        if self.redirect_to is not None:
            target = self.redirect_to
        return None if target is None else (target, kind == "ASK")


def make_engine(engine: str, router: SlotRouter):
    return engine_class(engine)(router.links, router=router)


def run(made, request, api: str):
    if api == "sync":
        return made.run(request)
    rnd = made.begin(request)

    async def fed() -> None:
        await drive(rnd)

    asyncio.run(fed())
    return made.finish(rnd)


def keys_on(node_of, node: int, count: int, prefix: str) -> list[bytes]:
    """`count` keys whose slots node `node` serves (as node_of says)."""
    found: list[bytes] = []
    index = 0
    while len(found) < count:
        key = f"{prefix}:{index}".encode()
        if node_of(key_slot(key)) == node:
            found.append(key)
        index += 1
    return found


def tokens_for(keys: Sequence[bytes]) -> list[bytes]:
    return [b"%040d" % index for index in range(len(keys))]


def set_nx(keys: Sequence[bytes]) -> SetNx:
    return SetNx(list(keys), tokens_for(keys), TTL_MS, TIMEOUT_MS)


def release(keys: Sequence[bytes]) -> RunScript:
    argvs = [(key, token) for key, token in zip(keys, tokens_for(keys))]
    return RunScript(RELEASE.sha, RELEASE.source, 1, argvs, TIMEOUT_MS, True)


def codes(results) -> list[bytes]:
    return [result[0] for result in results]


@pytest.fixture(scope="module")
def pair(redis_server_bin):
    made = ClusterPair()
    yield made
    made.close()


@pytest.fixture
def standalone(redis_server_bin):
    server = RedisServer()
    yield server
    server.cleanup()


@pytest.mark.parametrize("api", APIS)
def test_a_batch_goes_to_each_keys_node_and_counts_places(engine, api, pair, standalone, key):
    router = SlotRouter(pair, standalone)
    keys = keys_on(pair.owner, 0, 3, f"{key}:a") + keys_on(pair.owner, 1, 3, f"{key}:b")
    keys.sort()  # the two nodes' keys interleaved in the batch
    for admin in pair.admins():
        admin.config_resetstat()
    made = make_engine(engine, router)
    try:
        assert codes(run(made, set_nx(keys), api)) == [bytes([OK, OK])] * len(keys)
        for key_, token in zip(keys, tokens_for(keys)):
            assert pair.get(pair.owner(key_slot(key_)), key_) == token
            assert standalone.admin().get(key_) == token
        # each node was sent its own keys' commands only (a MOVED would count as a failed call)
        assert pair.calls(0, "set") == pair.calls(1, "set") == 3
        assert all("errorstat_MOVED" not in a.info("errorstats") for a in pair.admins())
        # The script's replies come back to the keys they answer, on both nodes.
        assert codes(run(made, release(keys), api)) == [bytes([OK, OK])] * len(keys)
        assert all(pair.get(pair.owner(key_slot(k)), k) is None for k in keys)
        assert router.seen == []
    finally:
        made.close()


@pytest.mark.parametrize("api", APIS)
def test_a_single_key_touches_only_its_node(engine, api, pair, key):
    router = SlotRouter(pair)
    (only,) = keys_on(pair.owner, 1, 1, key)
    pair.servers[1].admin().set(only, b"foreign", px=TTL_MS)
    other = pair.servers[0].admin()
    other.config_resetstat()
    opened = other.info("stats")["total_connections_received"]
    made = make_engine(engine, router)
    try:
        assert codes(run(made, set_nx([only]), api)) == [bytes([TAKEN])]
        # node a took no part: no connection opened to it, no command sent
        assert other.info("stats")["total_connections_received"] == opened
        assert "cmdstat_set" not in other.info("commandstats")
    finally:
        made.close()


@pytest.mark.parametrize("api", APIS)
def test_a_stale_assignment_follows_moved_within_the_round(engine, api, pair, key):
    router = SlotRouter(pair)
    keys = keys_on(pair.owner, 0, 2, f"{key}:a") + keys_on(pair.owner, 1, 2, f"{key}:b")
    wrong = keys[0]
    router.owners[key_slot(wrong)] = 1  # the router's map is out of date for this key's slot
    made = make_engine(engine, router)
    try:
        # connected to both nodes first: a redirection goes only to a connected node
        router.owners[key_slot(wrong)] = 0
        assert codes(run(made, release(keys), api)) == [bytes([TAKEN])] * 4
        router.owners[key_slot(wrong)] = 1
        assert codes(run(made, set_nx(keys), api)) == [bytes([OK])] * 4
        assert [text.split()[0] for _link, text in router.seen] == ["MOVED"]
        assert router.seen[0][0] == 1
        assert router.owners[key_slot(wrong)] == 0  # MOVED updated the map
        assert pair.get(0, wrong) == tokens_for(keys)[0]
        router.owners[key_slot(wrong)] = 1
        assert codes(run(made, release(keys), api)) == [bytes([OK])] * 4
        assert pair.get(0, wrong) is None
        assert [text.split()[0] for _link, text in router.seen] == ["MOVED", "MOVED"]
    finally:
        made.close()


@pytest.mark.parametrize("api", APIS)
def test_ask_during_a_migration_is_followed_with_asking(engine, api, pair, key):
    a, b = pair.admins()
    (tag,) = keys_on(pair.owner, 0, 1, f"{key}:tag")
    moving, staying = b"{%s}:moving" % tag, b"{%s}:staying" % tag
    (elsewhere,) = keys_on(pair.owner, 1, 1, f"{key}:b")
    slot = key_slot(moving)
    router = SlotRouter(pair)
    made = make_engine(engine, router)
    try:
        # connected to b first (a redirection goes only to a connected node), where the release
        # script has not run yet: it goes there as EVAL
        assert codes(run(made, set_nx([elsewhere]), api)) == [bytes([OK])]
        a.set(staying, b"foreign", px=TTL_MS)
        b.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", pair.ids[0])
        a.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", pair.ids[1])
        # `staying` is on a (its slot is migrating, the key has not moved): a answers it;
        # `moving` does not exist on a: a answers ASK, b takes it after ASKING
        result = run(made, set_nx([moving, staying]), api)
        assert codes(result) == [bytes([OK]), bytes([TAKEN])]
        assert [text.split()[0] for _link, text in router.seen] == ["ASK"]
        assert pair.get(1, moving) == tokens_for([moving])[0]
        assert router.owners[slot] == 0  # ASK leaves the map as it is
        # the foreign key moves too; the release script of `moving` follows ASK again
        a.execute_command("MIGRATE", "127.0.0.1", pair.servers[1].port, staying, 0, 5000)
        assert codes(run(made, release([moving]), api)) == [bytes([OK])]
        assert pair.get(1, moving) is None
        assert [text.split()[0] for _link, text in router.seen] == ["ASK", "ASK"]
    finally:
        made.close()
        # the slot is b's from now on, on both nodes' maps
        for admin in (b, a):
            admin.execute_command("CLUSTER", "SETSLOT", slot, "NODE", pair.ids[1])
        wait_until(lambda: pair.owner(slot) == 1, 10, "the slot's move to b")


@pytest.mark.parametrize("api", APIS)
def test_a_redirection_the_engine_cannot_follow_votes_error_with_the_reply(engine, api, pair, key):
    # a third link in the cluster's place, never connected (no key of the round is its own)
    router = SlotRouter(pair, extra_ports=[free_port()])
    keys = keys_on(pair.owner, 0, 1, f"{key}:a") + keys_on(pair.owner, 1, 1, f"{key}:b")
    router.owners[key_slot(keys[0])] = 1
    router.redirect_to = 2
    made = make_engine(engine, router)
    try:
        results = run(made, set_nx(keys), api)
        assert codes(results) == [bytes([ERROR]), bytes([OK])]
        detail = results[0][2][0]
        assert detail.startswith("MOVED ") and detail == router.seen[0][1]
        assert pair.get(0, keys[0]) is None and pair.get(1, keys[0]) is None
        # a router that names no link: the same
        router.redirect_to = None
        router.ports[0] = -1  # (node a's address is not one of the router's now)
        router.owners[key_slot(keys[0])] = 1
        results = run(made, set_nx(keys[:1]), api)
        assert codes(results) == [bytes([ERROR])]
        assert results[0][2][0].startswith("MOVED ")
        # a router that keeps naming the wrong node: followed MAX_REDIRECTS times, then the
        # reply is the vote (the router is not asked again)
        router.redirect_to = 1
        router.owners[key_slot(keys[0])] = 1
        before = len(router.seen)
        results = run(made, set_nx(keys[:1]), api)
        assert codes(results) == [bytes([ERROR])]
        assert len(router.seen) - before == MAX_REDIRECTS
        assert results[0][2][0].startswith("MOVED ")
    finally:
        made.close()


@pytest.mark.parametrize("api", APIS)
def test_a_node_killed_mid_round_fails_only_its_keys(engine, api, standalone, key):
    fresh = ClusterPair()
    try:
        router = SlotRouter(fresh, standalone)
        keys = keys_on(fresh.owner, 0, 2, f"{key}:a") + keys_on(fresh.owner, 1, 2, f"{key}:b")
        made = make_engine(engine, router)
        try:
            # connected to every node first: the round's commands go out at its start
            assert codes(run(made, release(keys), api)) == [bytes([TAKEN, TAKEN])] * 4
            victim = fresh.servers[1]
            sleep = DebugSleep([victim], 30)  # b holds what it is sent, unanswered
            if api == "events":
                rnd = made.begin(set_nx(keys))  # written to every node here
                sleep.close()
                victim.kill()
                asyncio.run(drive(rnd))
                results = made.finish(rnd)
            else:
                got: list = []
                worker = threading.Thread(target=lambda: got.append(made.run(set_nx(keys))))
                worker.start()
                try:
                    wait_until(lambda: queued_on(victim.port), 10, "the round's bytes on b")
                finally:
                    sleep.close()
                    victim.kill()
                    worker.join(30)
                results = got[0]
            assert codes(results) == [bytes([OK, OK])] * 2 + [bytes([CONN_ERROR, OK])] * 2
            assert all(fresh.get(0, k) == t for k, t in zip(keys[:2], tokens_for(keys)))
        finally:
            made.close()
    finally:
        fresh.close()


def queued_on(port: int) -> bool:
    """Whether a connection to this local port has bytes its server has not read (the engine's
    commands sent to a node that sleeps)."""
    with open("/proc/net/tcp") as table:
        for line in table.readlines()[1:]:
            fields = line.split()
            local, queues = fields[1], fields[4]
            if int(local.split(":")[1], 16) == port and int(queues.split(":")[1], 16) > 0:
                return True
    return False
