"""`hiredlock status NAME`: per master, the key, its PTTL and the holder's token prefix and owner
label, the read-write and fair locks of the name (writer, readers, waiters in the queue) and the
semaphore permits of the name that are held (and its size, stored with it); then in which ways a
majority holds the name.

exists and PTTL come from the library's inspect(); the token and the permits are read with plain
redis-py commands per master (a short timeout, all masters at once), since inspect() only says
whether a key is ours: a GET of the name, and an MGET of every permit key the name may have.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, Optional

from .clients import need_redis, redis_client
from .exits import NOT_HELD, OK, UNREACHABLE, USAGE, CliError
from .masters import master_urls, namespace, open_redlock
from .output import table

TIMEOUT = 0.5  # seconds each master gets, for inspect() and for the plain reads
TOKEN_SHOWN = 8  # hex characters of a token shown: enough to tell holders apart
TOKEN_RE = re.compile(r"\A[0-9a-f]{40}(?: |\Z)")  # (a space: an owner label follows)
PERMITS_SHOWN = 10  # permit numbers listed in a row or a summary; more are counted


class Read(NamedTuple):
    """What the plain reads found on one master (None: not read there)."""

    token: Optional[str]
    permits: Optional[tuple[int, ...]]  # the semaphore permits of the name held there


def command(options: argparse.Namespace) -> int:
    urls, source = master_urls(options.masters)
    need_redis(USAGE)  # before any I/O: status is not half-done without it
    prefix = namespace(options.namespace)
    redlock = open_redlock(urls, source, master_timeout=TIMEOUT, namespace=prefix)
    try:
        try:
            states = redlock.inspect(options.name)
        except (ValueError, TypeError) as exc:
            raise CliError(f"NAME: {exc}", USAGE) from None
        with ThreadPoolExecutor(max_workers=len(redlock.masters)) as pool:
            space = redlock.namespace
            reads = list(pool.map(lambda spec: _read(spec, options.name, space), redlock.masters))
        quorum = redlock.quorum
    finally:
        redlock.close()

    rows = [_row(state, read) for state, read in zip(states, reads)]
    table(("master", "key", "pttl", "token", "note"), rows, right=(2,))
    verdicts = _held(options.name, states, reads, quorum)
    for line in verdicts:
        print(line)
    if verdicts:
        return OK
    holding = sum(1 for state in states if state.exists)
    answered = sum(1 for state in states if state.exists is not None)
    if answered >= quorum:
        print(
            f"not held by a majority: {holding} of {len(states)} masters hold "
            f"{options.name!r} (quorum {quorum})"
        )
        return NOT_HELD
    print(f"unknown: only {answered} of {len(states)} masters answered (quorum {quorum})")
    return UNREACHABLE


def _held(name: str, states: Sequence[Any], reads: Sequence[Read], quorum: int) -> list[str]:
    """One line per way a majority holds the name: its key (a lock, a fair lock), the read-write
    lock's writer or readers, the semaphore's permits. Empty when none."""
    n = len(states)
    lines = []
    holding = sum(1 for state in states if state.exists)
    if holding >= quorum:
        counts = Counter(read.token for state, read in zip(states, reads) if state.exists)
        counts.pop(None, None)
        holder = f", token {counts.most_common(1)[0][0]}" if counts else ""
        owners = Counter(state.owner for state in states if state.exists and state.owner)
        if owners:
            holder += f", owner {owners.most_common(1)[0][0]!r}"
        lines.append(
            f"held by a majority: {holding} of {n} masters hold {name!r} (quorum {quorum}){holder}"
        )
    writers = sum(1 for state in states if state.writer)
    if writers >= quorum:
        lines.append(
            f"write-locked by a majority: {writers} of {n} masters have a writer of {name!r} "
            f"(quorum {quorum})"
        )
    read_locked = sum(1 for state in states if state.readers)
    if read_locked >= quorum:
        lines.append(
            f"read-locked by a majority: {read_locked} of {n} masters have readers of {name!r} "
            f"(quorum {quorum})"
        )
    per_permit = Counter(index for read in reads for index in read.permits or ())
    permits = sorted(index for index, count in per_permit.items() if count >= quorum)
    sizes = Counter(state.permits for state in states if state.permits)
    size = next((size for size, count in sizes.items() if count >= quorum), None)
    if permits:
        # (the size is the one a majority keeps: see Redlock.inspect)
        free = f"; {size} permits, {max(0, size - len(permits))} free" if size else ""
        lines.append(
            f"semaphore {name!r}: {len(permits)} permit{'s' if len(permits) > 1 else ''} held "
            f"by a majority (permits {_listed(permits)}; quorum {quorum}){free}"
        )
    return lines


def _row(state: Any, read: Read) -> tuple[str, ...]:
    if state.exists is None:
        note = state.outcome.name.lower() + (f": {state.detail}" if state.detail else "")
        return (state.master, "-", "-", "-", note)
    note = _kinds(state, read)
    if not state.exists:
        return (state.master, "no", "-", "-", note)
    pttl = "no expiry" if state.pttl_ms is not None and state.pttl_ms < 0 else "-"
    if state.pttl_ms is not None and state.pttl_ms >= 0:
        pttl = f"{state.pttl_ms / 1000:.3f} s"
    return (state.master, "yes", pttl, read.token or "?", note)


def _kinds(state: Any, read: Read) -> str:
    """The read-write lock, fair lock and semaphore of the name on this master, when any."""
    parts = []
    if state.owner is not None:
        parts.append(f"owner: {state.owner!r}")
    if state.writer:
        parts.append("rwlock: a writer")
    if state.readers:
        parts.append(f"rwlock: {state.readers} reader{'s' if state.readers > 1 else ''}")
    if state.waiting:
        parts.append(f"fair queue: {state.waiting} waiting")
    size = state.permits
    if read.permits or size:
        plural = "s" if read.permits and len(read.permits) > 1 else ""
        held = f" permit{plural} {_listed(read.permits)}" if read.permits else ""
        of = f" ({state.permits_held} of {size} held)" if size else ""
        parts.append(f"semaphore:{held}{of}")
    return "; ".join(parts)


def _listed(indexes: Sequence[int]) -> str:
    shown = ", ".join(str(index) for index in indexes[:PERMITS_SHOWN])
    more = len(indexes) - PERMITS_SHOWN
    return shown + (f" and {more} more ({len(indexes)})" if more > 0 else "")


def _read(spec: Any, name: str, namespace: bytes) -> Read:
    """The value of `name` (a short form) and the permits of the semaphore `name` held on one
    master; None for what cannot be read (also on TLS, Sentinel-managed and cluster masters,
    which these plain redis-py reads do not reach)."""
    from hiredlock._core import validation as _validation
    from hiredlock._core.keys import NameKeys
    from hiredlock._core.semaphores import MAX_PERMITS

    redis = need_redis(USAGE)
    if spec.tls is not None or spec.sentinel is not None or spec.cluster is not None:
        return Read(None, None)

    client = redis_client(
        host=spec.host or "localhost",
        port=spec.port,
        unix_socket_path=spec.path,
        db=spec.db,
        username=spec.username,
        password=spec.password,
        socket_timeout=TIMEOUT,
        socket_connect_timeout=TIMEOUT,
    )
    layout = NameKeys(namespace, _validation.lock_name(name))
    key = layout.key
    try:
        try:
            value = client.get(key)
        except redis.ResponseError:
            token: Optional[str] = "(not a string)"
        else:
            token = _short(value)
        # Every permit a semaphore of this name can have (its size is on the masters only
        # while permits are held, and a holder of another size may have taken any): one MGET,
        # None for a permit that is free (or not a string).
        values = client.mget([layout.permit(index) for index in range(MAX_PERMITS)])
        permits = tuple(index for index, value in enumerate(values) if value is not None)
    except redis.RedisError:
        return Read(None, None)
    finally:
        client.close()
    return Read(token, permits)


def _short(value: Optional[bytes]) -> Optional[str]:
    if value is None:
        return None
    text = value.decode("utf-8", "replace")
    if TOKEN_RE.match(text):
        return text[:TOKEN_SHOWN]
    return repr(text) if len(text) <= TOKEN_SHOWN else repr(text[:TOKEN_SHOWN]) + "..."
