"""Sentinel-managed masters: where the sentinels say a group's master is now.

A master given as a Sentinel group (redis+sentinel://h1:26379,h2:26379/service/db, a dict with
`sentinels` and `service_name`, or a redis-py client from Sentinel.master_for()) has no fixed
address. _resolver keeps its current one the way it keeps a host name's: asked in the background
(find_master, here), never on a round's clock except for the very first answer, asked
again every SENTINEL_ANSWER_LIFETIME_S while rounds use it, and at once when the engines report that
the master failed them (a broken connection, or READONLY: it is a replica now). When no sentinel
answers, the master they last named serves until STALE_LIFETIME_S after their last answer; past
that, the engines close its connections and the group votes CONN_ERROR with their reasons.

Each sentinel is asked in turn, over a short blocking connection of its own (in the lookup's
background thread), with SENTINEL GET-MASTER-ADDR-BY-NAME; the first one that names a master wins.
"""

from __future__ import annotations

import socket

from .._core.places import SentinelGroup
from .resp import NOT_READY, ProtocolError, Reader, ReplyError, pack_auth, pack_command

# How long one sentinel may take to answer, connect included (a background thread waits, not a
# round).
SENTINEL_TIMEOUT_S = 0.5


class SentinelLookupError(Exception):
    """No sentinel named a master for the group; str() says what each one said."""


def find_master(group: SentinelGroup, timeout_s: float = SENTINEL_TIMEOUT_S) -> tuple[str, int]:
    """(host, port) of the master the first answering sentinel names; SentinelLookupError
    with every sentinel's reason when none does. Blocks: call it from a lookup thread."""
    reasons = []
    for host, port in group.sentinels:
        try:
            reply = _ask(group, host, port, timeout_s)
        except OSError as exc:
            reasons.append(f"{host}:{port}: {exc.strerror or exc}")
            continue
        except ProtocolError as exc:
            reasons.append(f"{host}:{port}: protocol error: {exc}")
            continue
        if isinstance(reply, ReplyError):
            reasons.append(f"{host}:{port}: {reply.text}")
            continue
        if reply is None:
            reasons.append(f"{host}:{port} knows no master named {group.service_name!r}")
            continue
        if (
            not isinstance(reply, list)
            or len(reply) != 2
            or not all(isinstance(part, bytes) for part in reply)
            or not reply[1].isdigit()
        ):
            reasons.append(f"{host}:{port}: unexpected reply {reply!r}")
            continue
        return reply[0].decode("utf-8", "replace"), int(reply[1])
    if all("knows no master named" in reason for reason in reasons):
        raise SentinelLookupError(
            f"sentinel: no master named {group.service_name!r} ({'; '.join(reasons)})"
        )
    raise SentinelLookupError(f"sentinel: no master found ({'; '.join(reasons)})")


def _ask(group: SentinelGroup, host: str, port: int, timeout_s: float) -> object:
    commands = []
    if group.password is not None:
        commands.append(pack_auth(group.username, group.password))
    commands.append(
        pack_command((b"SENTINEL", b"GET-MASTER-ADDR-BY-NAME", group.service_name.encode()))
    )
    replies: list[object] = []
    reader = Reader()
    with socket.create_connection((host, port), timeout=timeout_s) as sock:
        sock.sendall(b"".join(commands))
        while len(replies) < len(commands):
            data = sock.recv(4096)
            if not data:
                raise ConnectionError("connection closed by the sentinel")
            reader.feed(data)
            while (reply := reader.get()) is not NOT_READY:
                replies.append(reply)
    if isinstance(replies[0], ReplyError) and len(replies) > 1:
        return replies[0]  # the login was refused
    return replies[-1]
