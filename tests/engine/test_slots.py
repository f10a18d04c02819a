"""The hash slot of a key, checked against a real cluster-mode server's CLUSTER KEYSLOT."""

from __future__ import annotations

import pytest
from servers import RedisServer, free_port

from hiredlock._core.slots import SLOTS, has_hash_tag, hash_tag, key_slot

KEYS = [
    b"foo",
    b"",
    b"{user1000}.following",
    b"{user1000}.followers",
    b"foo{}{bar}",
    b"foo{{bar}}zap",
    b"foo{bar}{zap}",
    b"{}",
    b"a}b",
    b"a{b",
    b"\xff\x00{\x01}",
    "n\u00e4me".encode(),
]


@pytest.fixture(scope="module")
def cluster_mode_server(redis_server_bin):
    # (its cluster bus on a port of its own: the default, port + 10000, may not exist)
    server = RedisServer(
        extra_args=("--cluster-enabled", "yes", "--cluster-port", str(free_port()))
    )
    yield server
    server.cleanup()


@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_key_slot_is_the_servers(key: bytes, cluster_mode_server) -> None:
    client = cluster_mode_server.client()
    assert key_slot(key) == client.execute_command("CLUSTER", "KEYSLOT", key)


def test_hash_tag_follows_the_first_brace_pair() -> None:
    assert hash_tag(b"{user1000}.following") == b"user1000"
    assert hash_tag(b"foo{}{bar}") == b"foo{}{bar}"  # an empty first pair: the whole key
    assert hash_tag(b"foo{{bar}}zap") == b"{bar"
    assert hash_tag(b"foo{bar}{zap}") == b"bar"
    assert not has_hash_tag(b"foo{}{bar}") and has_hash_tag(b"foo{bar}{zap}")
    assert 0 <= key_slot(b"anything") < SLOTS
