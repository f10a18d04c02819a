"""Where a name's keys and channels are (hiredlock._core.keys): every internal key and channel of
a name in the hash slot of the name's own key, for every name and namespace; and every lock kind
working on a cluster-mode server (one node owning every slot), where a script whose keys hash to
different slots is refused with CROSSSLOT."""

from __future__ import annotations

import random

import pytest
from apis import make_redlock_fixture, pytest_generate_tests, rwlock  # noqa: F401
from clusters import whole_cluster_server
from layout_support import exercise_every_kind

from hiredlock._core.keys import NameKeys, stand_in_tag
from hiredlock._core.slots import SLOTS, hash_tag, key_slot

NAMES = [
    b"a",
    b"orders",
    b"{user1000}.following",
    b"{user1000}.followers",
    b"{",
    b"}",
    b"{}",
    b"}{",
    b"a}b",
    b"a{b",
    b"{x}y",
    b"x{y}",
    b"{}{x}",
    b"foo{{bar}}zap",
    b"\xff\x00{\x01}",
    b"\xff}\xfe",
    "n\u00e4me{\u00e9}".encode(),
    b"0",
    b"{0}",
    b"hiredlock:released:x",
]
NAMESPACES = [b"", b"billing:", b"{app}:", b"a}b:", b"\xff:", b"x{y}z:"]


def _random_names(count: int) -> list[bytes]:
    chance = random.Random(20261126)  # (fixed: the same names on every run)
    alphabet = b"ab{}:\xff0"
    return [
        bytes(chance.choice(alphabet) for _ in range(chance.randint(1, 9))) for _ in range(count)
    ]


def everything_of(layout: NameKeys) -> list[bytes]:
    """Every internal key and channel of one name (permits 0..2)."""
    return [
        layout.fence,
        *layout.rw,
        *layout.fair,
        *(layout.permit(i) for i in range(3)),
        layout.permit_size,
        layout.channel,
        layout.rw_channel,
    ]


ALL_NAMES = NAMES + _random_names(3000)


@pytest.mark.parametrize("namespace", NAMESPACES, ids=repr)
def test_every_key_and_channel_is_in_the_slot_of_the_names_key(namespace: bytes) -> None:
    for name in ALL_NAMES:
        layout = NameKeys(namespace, name)
        assert layout.key == namespace + name  # the name's own key: the namespace and the name
        slot = key_slot(layout.key)
        for key in everything_of(layout):
            assert key.startswith(namespace + b"hiredlock:"), (name, key)
            assert key_slot(key) == slot, (namespace, name, key)


@pytest.mark.parametrize("namespace", NAMESPACES, ids=repr)
def test_keys_are_distinct_across_names_and_kinds(namespace: bytes) -> None:
    """No two (name, kind) pairs share a key or channel, and no internal key is a name's own key
    (names under hiredlock's reserved prefixes are refused)."""
    seen: dict[bytes, tuple[bytes, int]] = {}
    own = {namespace + name for name in ALL_NAMES}
    for name in ALL_NAMES:
        for kind, key in enumerate(everything_of(NameKeys(namespace, name))):
            assert seen.setdefault(key, (name, kind)) == (name, kind), (key, seen[key], name)
            assert key not in own, (name, key)


def test_the_stand_in_tag_has_the_slot_and_no_brace() -> None:
    """A name with no tag but a "}" gets a tag of the same slot: the smallest number there."""
    for slot in (0, 1, 5000, SLOTS - 1, key_slot(b"a}b")):
        tag = stand_in_tag(slot)
        assert key_slot(tag) == slot and tag.isdigit()
        assert all(key_slot(b"%d" % n) != slot for n in range(int(tag)))
    assert hash_tag(NameKeys(b"", b"a}b").fence) == stand_in_tag(key_slot(b"a}b"))


def test_the_layout_is_as_documented() -> None:
    plain = NameKeys(b"", b"orders")
    assert plain.key == b"orders"
    assert plain.fence == b"hiredlock:fence:{orders}"
    assert plain.permit(3) == b"hiredlock:permit:3:{orders}"
    assert plain.permit_parts == (b"hiredlock:permit:", b":{orders}")
    assert plain.rw[0] == b"hiredlock:rw:w:{orders}"
    assert plain.channel == b"hiredlock:released:{orders}"
    tagged = NameKeys(b"billing:", b"{user1}:cart")
    assert tagged.key == b"billing:{user1}:cart"
    assert tagged.fair == (
        b"billing:hiredlock:fair:q:{user1}{user1}:cart",
        b"billing:hiredlock:fair:e:{user1}{user1}:cart",
    )
    assert NameKeys(b"billing:", b"x").rw_channel == b"billing:hiredlock:released:rw:{billing:x}"


# -- on a cluster-mode server ------------------------------------------------------------------


@pytest.fixture(scope="module")
def whole_cluster(redis_server_bin):
    server = whole_cluster_server()
    yield server
    server.cleanup()


CLUSTER_NAMES = ["orders", "{user1}:cart", "a}b", b"\xff{", "{x}y"]


@pytest.mark.parametrize("name", CLUSTER_NAMES, ids=repr)
def test_every_kind_works_on_a_cluster_mode_server(api, make_redlock, whole_cluster, name):
    """Every script of every kind touches one slot: no CROSSSLOT refusal on a cluster."""
    rl = make_redlock([whole_cluster.url])
    exercise_every_kind(rl, name)
    assert whole_cluster.admin().keys("*") == []  # (nothing left behind, in any slot)


@pytest.mark.parametrize("namespace", ["billing:", "{app}:", b"a}b:"], ids=repr)
def test_every_kind_works_on_a_cluster_mode_server_in_a_namespace(
    api, make_redlock, whole_cluster, namespace
):
    """The tag rule holds after the namespace: a namespace's own tag ("{app}:") puts all of
    its names in one slot, and every kind still works there."""
    rl = make_redlock([whole_cluster.url], namespace=namespace)
    for name in ("orders", "{user1}:cart", "a}b"):
        exercise_every_kind(rl, name)
    assert whole_cluster.admin().keys("*") == []


def test_keys_held_are_in_the_names_slot(api, make_redlock, whole_cluster):
    """While a name is held as each kind, every key on the server is in its slot."""
    rl = make_redlock([whole_cluster.url])
    admin = whole_cluster.admin()
    admin.flushall()
    name = "slot:check"
    slot = key_slot(name.encode())
    held = [
        rl.lock(name, 10, fencing=True),
        rl.lock(name + ":fair", 10, fair=True),
    ]
    for lock in held:
        assert lock.acquire(blocking=False)
    reader = rwlock(rl, name + ":rw", 10).read()
    assert reader.acquire(blocking=False)
    permit = rl.semaphore(name + ":sem", 3, 10).acquire(blocking=False)
    assert permit is not None
    by_name = {name: slot}
    for suffix in (":fair", ":rw", ":sem"):
        by_name[name + suffix] = key_slot((name + suffix).encode())
    keys = admin.keys("*")
    assert len(keys) >= 6, keys
    for key in keys:
        assert key_slot(key) == admin.execute_command("CLUSTER", "KEYSLOT", key)
        assert key_slot(key) in by_name.values(), key
    for lock in (*held, reader, permit):
        lock.release()
    rl.delete_fence_counter(name)
