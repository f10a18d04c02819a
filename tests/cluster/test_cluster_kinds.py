"""Every lock kind on a Redis Cluster of 3 primaries (1 replica each) as one master, on both
engines and both APIs: each name's commands go to its slot's primary, a batch's names to all three
at once, release notices come through sharded pub/sub on the name's node, and the quorum counts
places (a cluster beside standalone masters) as it counts masters."""

from __future__ import annotations

import threading

import pytest
from apis import make_redlock_fixture, pytest_generate_tests  # noqa: F401  (both APIs)
from clusters import Cluster, cluster_fixture  # noqa: F401  (fixture)
from layout_support import exercise_every_kind
from support import urls

from hiredlock._core.slots import key_slot

# Names whose slots are on each of the three primaries (found below), so that every test uses
# every node.
SPREAD = [f"spread:{i}" for i in range(12)]


def primary_of(cluster, name: str):
    return cluster.server_on(cluster.owners()[key_slot(name.encode())])


def keys_left(cluster) -> list[bytes]:
    return [key for server in cluster.primaries() for key in server.admin().keys("*")]


def test_the_names_spread_over_every_primary(cluster):
    assert {primary_of(cluster, name).port for name in SPREAD} == {
        server.port for server in cluster.primaries()
    }


@pytest.mark.parametrize("name", ["orders", "{user1}:cart", "a}b", "spread:3", "spread:7"])
def test_every_kind_works_on_a_cluster(api, make_redlock, cluster, name):
    rl = make_redlock([cluster.url])
    exercise_every_kind(rl, name)
    assert keys_left(cluster) == []


def test_a_name_is_held_on_its_slots_primary_only(api, make_redlock, cluster, key):
    rl = make_redlock([cluster.url])
    lock = rl.lock(key, 10)
    assert lock.acquire(blocking=False)
    owner = primary_of(cluster, key)
    assert owner.admin().get(key) == lock.token.encode()
    for server in cluster.primaries():
        if server is not owner:
            assert server.admin().keys(key) == []  # (KEYS: this node's own, no redirection)
    lock.release()
    assert owner.admin().get(key) is None


def test_a_batch_goes_to_every_primary_in_one_round(api, make_redlock, cluster, key):
    """100 names over the three primaries: each primary runs the SETs of its own names, and
    every name is acquired, then released."""
    rl = make_redlock([cluster.url])
    names = [f"{key}:{i}" for i in range(100)]
    before = {server.port: set_calls(server) for server in cluster.primaries()}
    held = rl.acquire_many(names, 10)
    assert all(lock is not None for lock in held)
    expected: dict[int, int] = {}
    for name in names:
        port = primary_of(cluster, name).port
        expected[port] = expected.get(port, 0) + 1
    assert len(expected) == 3
    for server in cluster.primaries():
        assert set_calls(server) - before[server.port] == expected[server.port]
    rl.release_many(held)
    assert [k for k in keys_left(cluster) if k.startswith(key.encode())] == []


def set_calls(server) -> int:
    stats = server.admin().info("commandstats")
    return int(stats.get("cmdstat_set", {}).get("calls", 0))


def test_a_release_wakes_a_waiter_through_the_names_node(api, make_redlock, cluster, key):
    """The waiter subscribes (SSUBSCRIBE) on the primary of its name's slot; the release there
    wakes it long before its retry timer (30 s)."""
    holder = make_redlock([cluster.url])
    waiter = make_redlock([cluster.url], retry_delay=30)
    lock = holder.lock(key, 30)
    assert lock.acquire(blocking=False)
    waiting = waiter.lock(key, 30)
    got: list[bool] = []
    thread = threading.Thread(target=lambda: got.append(waiting.acquire(timeout=20)))
    thread.start()
    owner = primary_of(cluster, key).admin()
    channels = [b"hiredlock:released:{" + key.encode() + b"}"]
    for _ in range(400):
        if owner.pubsub_shardnumsub(*channels)[0][1] == 1:
            break
        thread.join(0.05)
    assert owner.pubsub_shardnumsub(*channels)[0][1] == 1, "the waiter never subscribed"
    lock.release()
    thread.join(15)
    assert got == [True]
    waiting.release()


def test_the_quorum_counts_a_cluster_as_one_place(api, make_redlock, cluster, masters5, key):
    """A cluster and two standalone masters: three places, quorum 2. With both standalone
    masters holding the name for someone else, the cluster's vote alone cannot take it."""
    rl = make_redlock([cluster.url, *urls(masters5[:2])])
    lock = rl.lock(key, 10)
    assert lock.acquire(blocking=False)
    votes = [vote.outcome.name for vote in lock.stats.votes]
    assert len(votes) == 3 and set(votes) <= {"OK", "SKIPPED"}, votes  # (three places)
    lock.release()
    for server in masters5[:2]:
        server.admin().set(key, b"someone-else", px=10_000)
    other = rl.lock(key, 10)
    assert not other.acquire(blocking=False)
    votes = [vote.outcome.name for vote in other.last_votes]
    assert votes[1:] == ["TAKEN", "TAKEN"] and votes[0] in ("OK", "SKIPPED"), votes
    assert primary_of(cluster, key).admin().get(key) is None  # (the failed attempt's unlock)


def test_a_multilock_over_several_slots_is_refused_before_any_io(api, make_redlock, canary):
    """One script takes all of a multilock's names on a master: on a cluster, one node, so the
    names must share a hash tag. Refused when the lock is made, with nothing sent."""
    rl = make_redlock([f"redis+cluster://127.0.0.1:{canary.port}"])
    with pytest.raises(ValueError, match="must share one hash tag"):
        rl.multilock(["orders", "invoices"], 10)
    rl.multilock(["{order:42}:stock", "{order:42}:invoice"], 10)  # one slot: made
    assert not canary.touched()


@pytest.fixture(scope="module")
def tls_cluster(redis_server_bin, tls_certs):
    made = Cluster(
        tls=tls_certs.server("good", auth_clients="no"),
        extra_args=("--tls-cluster", "yes", "--tls-replication", "yes"),
    )
    yield made
    made.cleanup()


def test_every_kind_works_on_a_tls_cluster(api, make_redlock, tls_cluster):
    """rediss+cluster://: the slot map asked over TLS names the nodes' TLS ports, and every
    node's connection speaks TLS."""
    rl = make_redlock([tls_cluster.tls_url])
    for name in ("orders", "spread:3", "spread:7"):
        exercise_every_kind(rl, name)
    assert keys_left(tls_cluster) == []


@pytest.fixture(scope="module")
def second_cluster(redis_server_bin):
    """Another cluster, to be a second place beside the session's (three primaries, no replica:
    its place's votes are what the test looks at)."""
    made = Cluster(replicas=0)
    yield made
    made.cleanup()


def test_two_clusters_are_two_places(api, make_redlock, cluster, second_cluster, masters5, key):
    """Two clusters and a standalone master: three places, quorum 2, each cluster routing the
    name to its own node. Every kind works over them; with the name held for someone else on the
    first cluster and on the standalone master, the second cluster's vote alone cannot take it,
    and the failed attempt leaves nothing on it."""
    rl = make_redlock([cluster.url, second_cluster.url, masters5[0].url])
    for name in ("orders", "spread:3", "spread:7"):
        exercise_every_kind(rl, name)
    assert keys_left(cluster) == [] and keys_left(second_cluster) == []
    lock = rl.lock(key, 10)
    assert lock.acquire(blocking=False)
    assert len(lock.stats.votes) == 3
    assert primary_of(second_cluster, key).admin().get(key) is not None
    lock.release()
    primary_of(cluster, key).admin().set(key, b"someone-else", px=10_000)
    masters5[0].admin().set(key, b"someone-else", px=10_000)
    other = rl.lock(key, 10)
    assert not other.acquire(blocking=False)
    votes = [vote.outcome.name for vote in other.last_votes]
    assert votes[0] == votes[2] == "TAKEN" and votes[1] in ("OK", "SKIPPED"), votes
    assert primary_of(second_cluster, key).admin().get(key) is None
    primary_of(cluster, key).admin().delete(key)  # (the session's cluster: left clean)
