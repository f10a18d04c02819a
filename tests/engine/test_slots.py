"""The hash slot of a key, checked against what a real server's CLUSTER KEYSLOT says (it answers
on a server without cluster mode too)."""

from __future__ import annotations

import pytest

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


@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_key_slot_is_the_servers(key: bytes, redis_factory) -> None:
    client = redis_factory().client()
    assert key_slot(key) == client.execute_command("CLUSTER", "KEYSLOT", key)


def test_hash_tag_follows_the_first_brace_pair() -> None:
    assert hash_tag(b"{user1000}.following") == b"user1000"
    assert hash_tag(b"foo{}{bar}") == b"foo{}{bar}"  # an empty first pair: the whole key
    assert hash_tag(b"foo{{bar}}zap") == b"{bar"
    assert hash_tag(b"foo{bar}{zap}") == b"bar"
    assert not has_hash_tag(b"foo{}{bar}") and has_hash_tag(b"foo{bar}{zap}")
    assert 0 <= key_slot(b"anything") < SLOTS
