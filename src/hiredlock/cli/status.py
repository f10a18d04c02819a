"""`hiredlock status NAME`: per master, the key, its PTTL and the holder's token prefix, and the
read-write and fair locks of the name (writer, readers, waiters in the queue); then whether a
majority holds it.

exists and PTTL come from the library's inspect(); the token is read with a plain GET per master
(redis-py, a short timeout, all masters at once), since inspect() only says whether a key is ours.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

from .clients import redis_client
from .exits import NOT_HELD, OK, UNREACHABLE, USAGE, CliError
from .masters import master_urls, open_redlock
from .output import table

TIMEOUT = 0.5  # seconds each master gets, for inspect() and for the GET
TOKEN_SHOWN = 8  # hex characters of a token shown: enough to tell holders apart
TOKEN_RE = re.compile(r"\A[0-9a-f]{40}\Z")


def command(options: argparse.Namespace) -> int:
    urls, source = master_urls(options.masters)
    redlock = open_redlock(urls, source, master_timeout=TIMEOUT)
    try:
        try:
            states = redlock.inspect(options.name)
        except (ValueError, TypeError) as exc:
            raise CliError(f"NAME: {exc}", USAGE) from None
        with ThreadPoolExecutor(max_workers=len(redlock.masters)) as pool:
            tokens = list(pool.map(lambda spec: _token(spec, options.name), redlock.masters))
        quorum = redlock.quorum
    finally:
        redlock.close()

    rows = [_row(state, token) for state, token in zip(states, tokens)]
    table(("master", "key", "pttl", "token", "note"), rows, right=(2,))
    holding = sum(1 for state in states if state.exists)
    answered = sum(1 for state in states if state.exists is not None)
    counts = Counter(token for state, token in zip(states, tokens) if state.exists and token)
    holder = f", token {counts.most_common(1)[0][0]}" if counts else ""
    of = f"{holding} of {len(states)} masters hold {options.name!r} (quorum {quorum})"
    if holding >= quorum:
        print(f"held by a majority: {of}{holder}")
        return OK
    if answered >= quorum:
        print(f"not held by a majority: {of}")
        return NOT_HELD
    print(f"unknown: only {answered} of {len(states)} masters answered (quorum {quorum})")
    return UNREACHABLE


def _row(state: Any, token: Optional[str]) -> tuple[str, ...]:
    if state.exists is None:
        note = state.outcome.name.lower() + (f": {state.detail}" if state.detail else "")
        return (state.master, "-", "-", "-", note)
    note = _kinds(state)
    if not state.exists:
        return (state.master, "no", "-", "-", note)
    pttl = "no expiry" if state.pttl_ms is not None and state.pttl_ms < 0 else "-"
    if state.pttl_ms is not None and state.pttl_ms >= 0:
        pttl = f"{state.pttl_ms / 1000:.3f} s"
    return (state.master, "yes", pttl, token or "?", note)


def _kinds(state: Any) -> str:
    """The read-write and fair lock of the name on this master, when there is one."""
    parts = []
    if state.writer:
        parts.append("rwlock: a writer")
    if state.readers:
        parts.append(f"rwlock: {state.readers} reader{'s' if state.readers > 1 else ''}")
    if state.waiting:
        parts.append(f"fair queue: {state.waiting} waiting")
    return "; ".join(parts)


def _token(spec: Any, name: str) -> Optional[str]:
    """A short form of the value of `name` on one master; None when it cannot be read (also for
    TLS and Sentinel-managed masters, which this plain redis-py read does not reach)."""
    import redis

    if spec.tls is not None or spec.sentinel is not None:
        return None

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
    try:
        value = client.get(name)
    except redis.ResponseError:
        return "(not a string)"
    except redis.RedisError:
        return None
    finally:
        client.close()
    if value is None:
        return None
    text = value.decode("utf-8", "replace")
    if TOKEN_RE.match(text):
        return text[:TOKEN_SHOWN]
    return repr(text) if len(text) <= TOKEN_SHOWN else repr(text[:TOKEN_SHOWN]) + "..."
