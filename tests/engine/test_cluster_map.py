"""A Redis Cluster's slot map, asked of real cluster nodes (3 primaries, 1 replica each): which
primary serves each slot, from any seed (a replica, after a dead one), logged in, over TLS, after
a failover and after a slot migration; the process-wide cache that keeps it; SlotMap's limits."""

from __future__ import annotations

import time
import urllib.parse

import pytest
import redis
from clusters import (  # noqa: F401  (fixtures)
    Cluster,
    SlotMigration,
    cluster_fixture,
    fresh_cluster_fixture,
)
from servers import RedisServer, free_port

from hiredlock._core.masters import parse_masters
from hiredlock._core.slots import SLOTS, key_slot
from hiredlock._engines import cluster as _cluster
from hiredlock._engines.cluster import (
    MAX_NODES,
    NO_NODE,
    ClusterLookupError,
    SlotMap,
    find_slots,
)

# (the slot map is asked in pure Python, the same for every engine: the wheel check leaves it out)
pytestmark = pytest.mark.slow

# How long a test polls the cache for a map that a background lookup brings (a loaded machine).
POLL_S = 30.0


def spec_of(master):
    return parse_masters([master])[0]


def owner_ports(slot_map: SlotMap) -> dict[int, int]:
    return {slot: slot_map.owner(slot)[1] for slot in range(SLOTS)}


def wait_for_map(spec, accept) -> SlotMap:
    """Polls the cache (refreshed in the background) until its map passes `accept`."""
    deadline = time.monotonic() + POLL_S
    while True:
        found = _cluster.current(spec, 1.0)
        if isinstance(found, SlotMap) and accept(found):
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"the cached map never changed as expected: {found!r}")
        _cluster.refresh(spec)
        time.sleep(0.05)


# -- discovery ------------------------------------------------------------------------------------


def test_every_slot_is_served_by_the_primary_the_cluster_names(cluster):
    slot_map = find_slots(spec_of(cluster.url))
    assert owner_ports(slot_map) == cluster.owners()
    primaries = {srv.port for srv in cluster.primaries()}
    assert {port for _host, port in slot_map.nodes} == primaries
    assert list(slot_map.nodes) == sorted(slot_map.nodes) and slot_map.served() == SLOTS
    replicas = {port for nodes in slot_map.replicas for _host, port in nodes}
    assert replicas == {srv.port for srv in cluster.servers} - primaries


def test_cluster_slots_gives_the_same_map_as_cluster_shards(cluster):
    # (CLUSTER SLOTS is what Redis 6 answers; CLUSTER SHARDS is asked first)
    reply = cluster.servers[0].admin().execute_command("CLUSTER", "SLOTS")
    spec = spec_of(cluster.url)
    plain = [
        [first, last, *[[host, port] for host, port, *_rest in nodes]]
        for first, last, *nodes in reply
    ]
    from_slots, from_shards = _cluster._from_slots(plain, "127.0.0.1", spec), find_slots(spec)
    # (CLUSTER SLOTS leaves out a replica that has not heard from its primary yet)
    assert (from_slots.nodes, from_slots.owners) == (from_shards.nodes, from_shards.owners)


def test_a_replica_seed_gives_the_map(cluster):
    replica = cluster.replica_of(cluster.primaries()[0])
    slot_map = find_slots(spec_of(f"redis+cluster://127.0.0.1:{replica.port}"))
    assert owner_ports(slot_map) == cluster.owners()


def test_a_dead_seed_is_passed_over(cluster):
    dead = free_port()  # (nothing listens there)
    url = f"redis+cluster://127.0.0.1:{dead},127.0.0.1:{cluster.servers[3].port}"
    assert owner_ports(find_slots(spec_of(url))) == cluster.owners()


def test_nodes_of_an_earlier_map_are_asked_when_no_seed_answers(cluster):
    dead = free_port()
    spec = spec_of(f"redis+cluster://127.0.0.1:{dead}")
    known = find_slots(spec_of(cluster.url)).known()
    assert owner_ports(find_slots(spec, known=known)) == cluster.owners()


def test_no_node_answers(redis_server_bin):
    lonely = RedisServer(
        extra_args=("--cluster-enabled", "yes", "--cluster-port", str(free_port()))
    )
    plain = RedisServer()
    try:
        dead = free_port()
        url = f"redis+cluster://127.0.0.1:{dead},127.0.0.1:{lonely.port},127.0.0.1:{plain.port}"
        with pytest.raises(ClusterLookupError) as caught:
            find_slots(spec_of(url))
    finally:
        lonely.cleanup()
        plain.cleanup()
    text = str(caught.value)
    assert f"127.0.0.1:{dead}: " in text and "refused" in text.lower(), text
    # a cluster-mode node in no cluster serves no slot; a standalone server has no cluster
    assert f"127.0.0.1:{lonely.port}: an empty slot map" in text, text
    assert f"127.0.0.1:{plain.port}: ERR This instance has cluster support disabled" in text, text


# -- login, TLS -----------------------------------------------------------------------------------


@pytest.fixture(name="locked_cluster", scope="module")
def locked_cluster_fixture(redis_server_bin):
    made = Cluster()
    made.set_password("s3cret-pw")
    for srv in made.live():
        srv.admin().execute_command("ACL", "SETUSER", "locker", "on", ">locker-pw", "~*", "+@all")
    yield made
    made.cleanup()


def test_login_with_a_password(locked_cluster):
    ports = [srv.port for srv in locked_cluster.servers[:2]]
    url = f"redis+cluster://:s3cret-pw@127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}"
    assert owner_ports(find_slots(spec_of(url))) == locked_cluster.owners()


def test_login_as_an_acl_user(locked_cluster):
    port = locked_cluster.servers[0].port
    spec = spec_of(
        {"cluster": [f"127.0.0.1:{port}"], "username": "locker", "password": "locker-pw"}
    )
    assert owner_ports(find_slots(spec)) == locked_cluster.owners()


@pytest.mark.parametrize("login", ["", ":wrong-pw@"], ids=["no-password", "wrong-password"])
def test_login_refused_says_so_without_the_password(locked_cluster, login):
    port = locked_cluster.servers[0].port
    with pytest.raises(ClusterLookupError) as caught:
        find_slots(spec_of(f"redis+cluster://{login}127.0.0.1:{port}"))
    text = str(caught.value)
    assert f"127.0.0.1:{port}: " in text and ("NOAUTH" in text or "WRONGPASS" in text), text
    assert "wrong-pw" not in text


def test_a_tls_cluster_gives_its_tls_ports(redis_server_bin, tls_certs):
    # (the cluster bus on TLS too: a node reports its TLS port only then)
    tls_cluster = Cluster(
        tls=tls_certs.server("good", auth_clients="no"),
        extra_args=("--tls-cluster", "yes", "--tls-replication", "yes"),
    )
    try:
        slot_map = find_slots(spec_of(tls_cluster.tls_url))
        plain_owners = tls_cluster.owners()
        by_port = {srv.port: srv.tls_port for srv in tls_cluster.servers}
    finally:
        tls_cluster.cleanup()
    assert owner_ports(slot_map) == {slot: by_port[port] for slot, port in plain_owners.items()}


def test_a_tls_seed_with_an_untrusted_certificate(redis_server_bin, tls_certs):
    server = RedisServer(
        tls=tls_certs.server("good", auth_clients="no"),
        extra_args=("--cluster-enabled", "yes", "--cluster-port", str(free_port())),
    )
    try:
        other_ca = urllib.parse.quote(tls_certs.wrong_ca, safe="/")
        url = f"rediss+cluster://127.0.0.1:{server.tls_port}?ssl_ca_certs={other_ca}"
        with pytest.raises(ClusterLookupError) as caught:
            find_slots(spec_of(url))
    finally:
        server.cleanup()
    assert f"127.0.0.1:{server.tls_port}: TLS: certificate verify failed" in str(caught.value)


# -- the map moves --------------------------------------------------------------------------------


def test_after_a_failover_the_map_names_the_promoted_replica(fresh_cluster):
    spec = spec_of(fresh_cluster.url)
    before = _cluster.current(spec, 5.0)
    assert isinstance(before, SlotMap), before
    try:
        victim = fresh_cluster.server_on(before.nodes[before.owners[0]][1])
        replica = fresh_cluster.kill_primary(victim)
        fresh_cluster.wait_for_promotion(replica)
        after = wait_for_map(spec, lambda found: found.owner(0)[1] == replica.port)
        assert owner_ports(after) == fresh_cluster.owners()
        assert ("127.0.0.1", victim.port) not in after.nodes
        # a fresh lookup seeded by the dead primary first still finds the map
        url = f"redis+cluster://127.0.0.1:{victim.port},127.0.0.1:{replica.port}"
        assert owner_ports(find_slots(spec_of(url))) == fresh_cluster.owners()
    finally:
        _cluster.forget(spec)


def test_after_a_slot_migration_the_map_names_the_new_owner(fresh_cluster):
    spec = spec_of(fresh_cluster.url)
    slot = key_slot(b"migrated-name")
    source = fresh_cluster.server_on(fresh_cluster.owners()[slot])
    target = next(srv for srv in fresh_cluster.primaries() if srv is not source)
    source.admin().set(b"migrated-name", b"1")
    migration = SlotMigration(fresh_cluster, slot, source, target)
    try:
        migration.begin()
        migration.move_keys()
        # mid-migration the source still owns the slot (keys moved answer ASK there)
        assert find_slots(spec).owner(slot)[1] == source.port
        ask = source.client()
        with pytest.raises(redis.exceptions.AskError):
            ask.get(b"migrated-name")
        migration.finish()
        assert find_slots(spec).owner(slot)[1] == target.port
        with pytest.raises(redis.exceptions.MovedError):
            source.client().get(b"migrated-name")
        after = wait_for_map(spec, lambda found: found.owner(slot)[1] == target.port)
        assert owner_ports(after) == fresh_cluster.owners()
    finally:
        _cluster.forget(spec)


# -- the cache ------------------------------------------------------------------------------------


def test_the_first_map_is_waited_for_then_served_from_the_cache(cluster):
    spec = spec_of(cluster.url)
    _cluster.forget(spec)
    try:
        first = _cluster.current(spec, 5.0)
        assert isinstance(first, SlotMap) and owner_ports(first) == cluster.owners()
        assert _cluster.current(spec, 0.0) is first  # (no lookup on the caller's clock)
    finally:
        _cluster.forget(spec)


def test_no_map_says_why(redis_server_bin):
    dead = free_port()
    spec = spec_of(f"redis+cluster://127.0.0.1:{dead}")
    try:
        found = _cluster.current(spec, 5.0)
        assert isinstance(found, str) and f"127.0.0.1:{dead}: " in found, found
    finally:
        _cluster.forget(spec)


# -- SlotMap --------------------------------------------------------------------------------------


def test_a_map_of_more_than_255_primaries_is_refused():
    shards = [(("10.0.0.1", 1000 + i), (), [(i, i)]) for i in range(MAX_NODES + 1)]
    with pytest.raises(ValueError, match="a cluster of 256 primaries: at most 255"):
        SlotMap.from_shards(shards)
    assert len(SlotMap.from_shards(shards[:MAX_NODES]).nodes) == MAX_NODES


def test_a_slot_no_node_serves():
    slot_map = SlotMap.from_shards([(("h", 1), (), [(0, 99)])])
    assert slot_map.owner(100) is None and slot_map.owners[100] == NO_NODE
    assert slot_map.served() == 100 and slot_map.owner(99) == ("h", 1)


def test_a_moved_slot_changes_one_owner():
    slot_map = SlotMap.from_shards([(("b", 1), (("b", 2),), [(0, SLOTS - 1)])])
    moved = slot_map.with_owner(7, ("a", 1))
    assert moved.nodes == (("a", 1), ("b", 1)) and moved.replicas == ((), (("b", 2),))
    assert moved.owner(7) == ("a", 1)
    assert all(moved.owner(slot) == ("b", 1) for slot in range(SLOTS) if slot != 7)
    assert "served=16384" in repr(moved) and len(repr(moved)) < 200
