"""Redis Cluster places: which primary serves each hash slot (the slot map), asked of the nodes.

A cluster given as one master (redis+cluster://h1:p1,h2:p2, a dict with `cluster`, a redis-py
RedisCluster) has no fixed address for a name: each of its 16384 slots is served by one primary.
find_slots() asks the seeds in turn (then the other nodes a previous map named) with CLUSTER
SHARDS, or CLUSTER SLOTS where SHARDS is an unknown command (Redis 6), over a short blocking
connection of its own, logged in and with TLS as the spec says. A node that answers CLUSTERDOWN
or an empty map is passed over; when none gives a map, ClusterLookupError says what each said.

The maps are kept by hiredlock._engines.resolver, as a Sentinel group's master is: asked in a
background thread, never on a round's clock except for the first answer (waited for at most what
the caller allows), asked again every CLUSTER_MAP_LIFETIME_S while used and at once on
refresh(spec) (a MOVED reply, a failed node). When no node answers, the last map serves until
resolver.STALE_LIFETIME_S after it came.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Optional, Union

from .._core.masters import MasterSpec
from .._core.slots import SLOTS, key_slot
from . import resolver as _resolver
from .resp import NOT_READY, ProtocolError, Reader, ReplyError, pack_auth, pack_command
from .tls import describe

Node = tuple[str, int]  # a node's (host, port)

# A slot's owner byte when no primary serves it; so at most 255 primaries in a map.
NO_NODE = 255
MAX_NODES = 255
# How long one node may take to give its map, connect and login included (a background thread
# waits, not a round).
CLUSTER_TIMEOUT_S = 0.5
# How often a map in use is asked again (a failover or a resharding is seen within this, or at
# once when the engines call refresh()).
CLUSTER_MAP_LIFETIME_S = 5.0
# CLUSTER SHARDS of a large cluster (every node, every slot range) is a few hundred kB at most.
_MAX_REPLY_BYTES = 64 * 1024 * 1024


class ClusterLookupError(_resolver.LookupFailed):
    """No node of the cluster gave a slot map; str() says what each one said."""


@dataclass(frozen=True)
class SlotMap:
    """The primaries of a cluster (`nodes`, sorted) and, for each slot, the index in `nodes` of
    the primary serving it (`owners`, SLOTS bytes; NO_NODE where none does). `replicas[i]`: the
    replicas of nodes[i], as the map's node said (asked when the seeds do not answer)."""

    nodes: tuple[Node, ...]
    owners: bytes
    replicas: tuple[tuple[Node, ...], ...] = ()

    def __post_init__(self) -> None:
        if len(self.nodes) > MAX_NODES:
            raise ValueError(
                f"a cluster of {len(self.nodes)} primaries: at most {MAX_NODES} are supported"
            )
        if len(self.owners) != SLOTS:
            raise ValueError(f"owners must have {SLOTS} entries, not {len(self.owners)}")
        if list(self.nodes) != sorted(set(self.nodes)):
            raise ValueError("nodes must be sorted, without duplicates")
        if self.replicas and len(self.replicas) != len(self.nodes):
            raise ValueError("replicas must have one entry per node")
        if any(owner != NO_NODE and owner >= len(self.nodes) for owner in set(self.owners)):
            raise ValueError("an owner names no node")

    @classmethod
    def from_shards(
        cls, shards: Iterable[tuple[Node, Sequence[Node], Sequence[tuple[int, int]]]]
    ) -> SlotMap:
        """The map of (primary, its replicas, its slot ranges (first, last) inclusive) shards."""
        shards = list(shards)
        nodes = tuple(sorted({primary for primary, _replicas, _ranges in shards}))
        if len(nodes) > MAX_NODES:
            raise ValueError(
                f"a cluster of {len(nodes)} primaries: at most {MAX_NODES} are supported"
            )
        index = {node: i for i, node in enumerate(nodes)}
        owners = bytearray([NO_NODE]) * SLOTS
        replicas: list[list[Node]] = [[] for _ in nodes]
        for primary, its_replicas, ranges in shards:
            replicas[index[primary]].extend(its_replicas)
            for first, last in ranges:
                if not 0 <= first <= last < SLOTS:
                    raise ValueError(f"bad slot range {first}-{last}")
                owners[first : last + 1] = bytes([index[primary]]) * (last - first + 1)
        return cls(nodes, bytes(owners), tuple(tuple(nodes) for nodes in replicas))

    def __repr__(self) -> str:  # (not the 16384 owner bytes)
        return f"SlotMap(nodes={self.nodes!r}, served={self.served()}, replicas={self.replicas!r})"

    def owner(self, slot: int) -> Optional[Node]:
        """The primary serving `slot`, or None."""
        at = self.owners[slot]
        return None if at == NO_NODE else self.nodes[at]

    def node_of(self, key: bytes) -> Optional[int]:
        """The index in `nodes` of the primary serving `key`'s slot, or None."""
        at = self.owners[key_slot(key)]
        return None if at == NO_NODE else at

    def served(self) -> int:
        """How many slots some primary serves."""
        return SLOTS - self.owners.count(NO_NODE)

    def known(self) -> tuple[Node, ...]:
        """Every node this map names: the primaries, then the replicas."""
        return self.nodes + tuple(node for nodes in self.replicas for node in nodes)

    def with_owner(self, slot: int, node: Node) -> SlotMap:
        """This map with `slot` served by `node` (a MOVED reply's news)."""
        nodes = self.nodes if node in self.nodes else tuple(sorted((*self.nodes, node)))
        if nodes is self.nodes:
            owners = bytearray(self.owners)
            replicas = self.replicas
        else:
            renumber = {old: nodes.index(name) for old, name in enumerate(self.nodes)}
            renumber[NO_NODE] = NO_NODE
            owners = bytearray(renumber[owner] for owner in self.owners)
            by_node = dict(zip(self.nodes, self.replicas)) if self.replicas else {}
            replicas = tuple(by_node.get(name, ()) for name in nodes) if self.replicas else ()
        owners[slot] = nodes.index(node)
        return SlotMap(nodes, bytes(owners), replicas)


class _Refused(Exception):
    """A node answered, but with no map (an error reply, CLUSTERDOWN, an empty map)."""


def find_slots(
    spec: MasterSpec, timeout_s: float = CLUSTER_TIMEOUT_S, known: Sequence[Node] = ()
) -> SlotMap:
    """The slot map the first answering node gives: the seeds are asked in turn, then `known`
    (the nodes of an earlier map). ClusterLookupError with each node's reason when none does.
    Blocks: call it from a lookup thread."""
    if spec.cluster is None:
        raise ValueError(f"{spec} is not a Redis Cluster")
    reasons = []
    asked: set[Node] = set()
    for host, port in (*spec.cluster.seeds, *known):
        if (host.lower(), port) in asked:
            continue
        asked.add((host.lower(), port))
        try:
            return _ask(spec, host, port, timeout_s)
        except ssl.SSLError as exc:
            reasons.append(f"{host}:{port}: {describe(exc)}")
        except OSError as exc:
            reasons.append(f"{host}:{port}: {exc.strerror or exc}")
        except ProtocolError as exc:
            reasons.append(f"{host}:{port}: protocol error: {exc}")
        except (_Refused, ValueError) as exc:
            reasons.append(f"{host}:{port}: {exc}")
    raise ClusterLookupError(f"cluster {spec.cluster}: no slot map ({'; '.join(reasons)})")


def _ask(spec: MasterSpec, host: str, port: int, timeout_s: float) -> SlotMap:
    deadline = time.monotonic() + timeout_s
    with socket.create_connection((host, port), timeout=timeout_s) as raw:
        sock: Any = raw
        if spec.tls is not None:
            name = spec.tls.server_hostname or host
            sock = spec.tls.context.wrap_socket(raw, server_hostname=name)
        exchange = _Exchange(sock, deadline)
        if spec.password is not None:
            login = exchange.call(pack_auth(spec.username, spec.password))
            if isinstance(login, ReplyError):
                raise _Refused(login.text)
        reply = exchange.call(pack_command((b"CLUSTER", b"SHARDS")))
        if isinstance(reply, ReplyError) and "unknown subcommand" in reply.text.lower():
            reply = exchange.call(pack_command((b"CLUSTER", b"SLOTS")))
            if isinstance(reply, ReplyError):
                raise _Refused(reply.text)
            slot_map = _from_slots(reply, host, spec)
        elif isinstance(reply, ReplyError):
            raise _Refused(reply.text)
        else:
            slot_map = _from_shards(reply, host, spec)
    if not slot_map.served():
        raise _Refused("an empty slot map (no slot is served)")
    return slot_map


class _Exchange:
    """One command at a time on a blocking socket, within a deadline."""

    def __init__(self, sock: Any, deadline: float) -> None:
        self.sock, self.deadline, self.reader = sock, deadline, Reader(_MAX_REPLY_BYTES)

    def call(self, command: bytes) -> object:
        self.sock.settimeout(max(0.001, self.deadline - time.monotonic()))
        self.sock.sendall(command)
        while (reply := self.reader.get()) is NOT_READY:
            self.sock.settimeout(max(0.001, self.deadline - time.monotonic()))
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("connection closed by the node")
            self.reader.feed(data)
        return reply


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _pairs(raw: object) -> dict[str, object]:
    if not isinstance(raw, list) or len(raw) % 2:
        raise _Refused(f"unexpected CLUSTER SHARDS entry {raw!r}")
    return {_text(key): value for key, value in zip(raw[::2], raw[1::2])}


def _port(value: object) -> int:
    port = int(_text(value)) if isinstance(value, (bytes, int)) else 0
    return port if 0 < port < 65536 else 0


def _shard_node(fields: dict[str, object], asked_host: str, spec: MasterSpec) -> Optional[Node]:
    """A node's address as a client reaches it: its endpoint (the address the cluster tells
    clients to use), else its ip, else its hostname, else the host just asked; its TLS port when
    the spec has TLS and the node has one, else its port. None when it has no port."""
    host = ""
    for key in ("endpoint", "ip", "hostname"):
        candidate = _text(fields.get(key, b""))
        if candidate and candidate != "?":
            host = candidate
            break
    port = _port(fields.get("port"))
    if spec.tls is not None and _port(fields.get("tls-port")):
        port = _port(fields.get("tls-port"))
    return (host or asked_host, port) if port else None


def _from_shards(reply: object, asked_host: str, spec: MasterSpec) -> SlotMap:
    """CLUSTER SHARDS: per shard its slot ranges and its nodes; the primary is the node whose
    role is master (the online one, when a failed old primary is still listed as master)."""
    if not isinstance(reply, list):
        raise _Refused(f"unexpected CLUSTER SHARDS reply {reply!r}")
    shards = []
    for raw in reply:
        shard = _pairs(raw)
        bounds = shard.get("slots")
        members = shard.get("nodes")
        if not isinstance(bounds, list) or not isinstance(members, list) or len(bounds) % 2:
            raise _Refused(f"unexpected CLUSTER SHARDS entry {raw!r}")
        if not bounds:
            continue
        ranges = [(int(_text(a)), int(_text(b))) for a, b in zip(bounds[::2], bounds[1::2])]
        primaries: list[tuple[bool, Node]] = []
        replicas: list[Node] = []
        for member in members:
            fields = _pairs(member)
            node = _shard_node(fields, asked_host, spec)
            if node is None:
                continue
            if _text(fields.get("role", b"")) in ("master", "primary"):  # (any fork's word)
                primaries.append((_text(fields.get("health", b"")) != "online", node))
            else:
                replicas.append(node)
        if primaries:
            shards.append((min(primaries)[1], replicas, ranges))
    return SlotMap.from_shards(shards)


def _from_slots(reply: object, asked_host: str, spec: MasterSpec) -> SlotMap:
    """CLUSTER SLOTS: [first, last, primary [host, port, ...], replica..., ] per range."""
    if not isinstance(reply, list):
        raise _Refused(f"unexpected CLUSTER SLOTS reply {reply!r}")
    by_primary: dict[Node, tuple[list[Node], list[tuple[int, int]]]] = {}
    for entry in reply:
        if not isinstance(entry, list) or len(entry) < 3:
            raise _Refused(f"unexpected CLUSTER SLOTS entry {entry!r}")
        nodes = []
        for member in entry[2:]:
            if not isinstance(member, list) or len(member) < 2 or not _port(member[1]):
                raise _Refused(f"unexpected CLUSTER SLOTS node {member!r}")
            host = _text(member[0])
            nodes.append((host if host and host != "?" else asked_host, _port(member[1])))
        replicas, ranges = by_primary.setdefault(nodes[0], ([], []))
        replicas.extend(node for node in nodes[1:] if node not in replicas)
        ranges.append((int(_text(entry[0])), int(_text(entry[1]))))
    return SlotMap.from_shards(
        (primary, replicas, ranges) for primary, (replicas, ranges) in by_primary.items()
    )


@dataclass(frozen=True)
class _MapOf:
    """The resolver's key (and asker) for a cluster's map."""

    spec: MasterSpec
    lifetime_s: ClassVar[float] = CLUSTER_MAP_LIFETIME_S

    def ask(self, last: Any) -> SlotMap:
        return find_slots(self.spec, known=last.known() if isinstance(last, SlotMap) else ())

    def __str__(self) -> str:
        return f"the slot map of {self.spec}"


def current(spec: MasterSpec, wait_s: float) -> Union[SlotMap, str]:
    """The cluster's slot map, or (a str) why there is none yet; waits at most wait_s, and only
    for the first map (see the module doc)."""
    found: Union[SlotMap, str] = _resolver.answer(_MapOf(spec), wait_s)
    return found


def refresh(spec: MasterSpec) -> None:
    """Asks for the cluster's map again now, in the background (the last one serves meanwhile)."""
    _resolver.refresh(_MapOf(spec))


def forget(spec: MasterSpec) -> None:
    """Drops the cached map of this cluster (the next current() asks and waits again)."""
    _resolver.forget(_MapOf(spec))
