"""Where a name's keys and channels are, written once: the name's own key (the namespace and the
name), and every key and channel hiredlock keeps for it (fence counter, semaphore permits and size,
read-write lock keys, fair lock queue, release-notice channels), all in the hash slot of the
name's own key so that every script touches one Redis Cluster slot.

Layout, for the key K = namespace + name and its hash tag (_core/slots.py):
    the name's own key            K (no namespace: the name itself, as older versions had it)
    fence counter                 <ns>hiredlock:fence:<tail>
    semaphore permit i            <ns>hiredlock:permit:<i>:<tail>
    semaphore size                <ns>hiredlock:permit:size:<tail>
    read-write lock               <ns>hiredlock:rw:w:|r:|ww:|rw:|rp:<tail>
    fair lock queue, expiries     <ns>hiredlock:fair:q:|e:<tail>
    release channel               <ns>hiredlock:released:<tail>
    read-write release channel    <ns>hiredlock:released:rw:<tail>
where <tail> is
    "{" tag "}" name   when K has a hash tag of its own (tag = hash_tag(K));
    "{" K "}"          when it has none and holds no "}" (Redis hashes K whole: so does "{K}");
    "{" S "}" name     else (no tag and a "}"): S is the smallest decimal number in K's slot.
Each key's hash tag is therefore the tag K hashes (or, for S, one of the same slot), and a key
names its name: the part before "{" says the kind, the part inside the braces ends at the first
"}", and the name follows it (or is inside the braces). A namespace that has a "{" must hold a
whole tag (checked in validation.namespace): then the namespace's tag is every key's.
"""

from __future__ import annotations

import functools
import itertools

from .slots import SLOTS, has_hash_tag, hash_tag, key_slot

PREFIX = b"hiredlock:"
_RW_PARTS = (b"w:", b"r:", b"ww:", b"rw:", b"rp:")

# What a name (or a namespace) must not start with: its key would be under hiredlock's own.
RESERVED_KEY_PREFIXES = tuple(PREFIX + kind for kind in (b"fence:", b"permit:", b"rw:", b"fair:"))


@functools.cache
def _stand_ins() -> tuple[bytes, ...]:
    """For each slot, the smallest decimal number in it (made once, on first need: about
    200,000 CRCs, a few tenths of a second)."""
    table: dict[int, bytes] = {}
    for number in itertools.count():
        candidate = b"%d" % number
        table.setdefault(key_slot(candidate), candidate)
        if len(table) == SLOTS:
            return tuple(table[slot] for slot in range(SLOTS))
    raise AssertionError("unreachable")  # pragma: no cover


def stand_in_tag(slot: int) -> bytes:
    """The smallest decimal number whose slot is `slot`: the tag of the keys of a name that has
    no tag of its own but a "}" (so its own key cannot be put in braces). The same on every
    client, as the keys must be."""
    return _stand_ins()[slot]


def tail(key: bytes, name: bytes) -> bytes:
    """The part of every internal key and channel of the name `name` (whose key is `key`, the
    namespace and the name) that puts them in the slot of `key` (see the module doc)."""
    if has_hash_tag(key):
        return b"{" + hash_tag(key) + b"}" + name
    if b"}" not in key:
        return b"{" + key + b"}"
    return b"{" + stand_in_tag(key_slot(key)) + b"}" + name


class NameKeys:
    """The keys and channels of one name under one namespace (see the module doc)."""

    __slots__ = ("_head", "_tail", "channel", "key", "keys")

    def __init__(self, namespace: bytes, name: bytes) -> None:
        self.key = namespace + name
        self.keys = (self.key,)  # (the keys of a round on the name's own key: every acquire's)
        self._head = namespace + PREFIX
        self._tail = tail(self.key, name)
        # Where a release of the name's lock, fair lock or semaphore permit is announced (made
        # here: every lock reads it)
        self.channel = self._of(b"released:")

    def _of(self, kind: bytes) -> bytes:
        return self._head + kind + self._tail

    @property
    def fence(self) -> bytes:
        return self._of(b"fence:")

    @property
    def rw(self) -> tuple[bytes, ...]:
        """(writer, readers, writer waiting, readers waiting, readers' pass)."""
        return tuple(self._of(b"rw:" + part) for part in _RW_PARTS)

    @property
    def fair(self) -> tuple[bytes, bytes]:
        """(the queue, the waiters' expiries)."""
        return self._of(b"fair:q:"), self._of(b"fair:e:")

    def permit(self, index: int) -> bytes:
        return self._of(b"permit:%d:" % index)

    @property
    def permit_parts(self) -> tuple[bytes, bytes]:
        """(prefix, suffix): permit i's key is prefix + i + suffix (for the scripts that go
        through a semaphore's permits)."""
        return self._head + b"permit:", b":" + self._tail

    @property
    def permit_size(self) -> bytes:
        return self._of(b"permit:size:")

    @property
    def rw_channel(self) -> bytes:
        """Where a release of the name's read-write lock is announced."""
        return self._of(b"released:rw:")
