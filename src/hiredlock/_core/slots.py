"""Redis Cluster's hash slots, computed as Redis computes them: a key's hash tag (the part between
its first "{" and the first "}" after it, when that part is not empty; else the whole key) and
its slot (CRC16-CCITT of the tag, modulo 16384). The layout of a name's keys (_core/keys.py) and
the routing of a cluster's commands both read them here."""

from __future__ import annotations

from binascii import crc_hqx

SLOTS = 16384


def hash_tag(key: bytes) -> bytes:
    """What Redis Cluster hashes of `key`: the part between its first "{" and the next "}" when
    that part is not empty, else the whole key."""
    start = key.find(b"{")
    if start != -1:
        end = key.find(b"}", start + 1)
        if end > start + 1:
            return key[start + 1 : end]
    return key


def has_hash_tag(key: bytes) -> bool:
    """Whether `key` has a hash tag of its own (hash_tag(key) is a part of it, not all of it)."""
    start = key.find(b"{")
    return start != -1 and key.find(b"}", start + 1) > start + 1


def key_slot(key: bytes) -> int:
    """The hash slot of `key` (0 to 16383), as CLUSTER KEYSLOT gives it."""
    return crc_hqx(hash_tag(key), 0) & (SLOTS - 1)
