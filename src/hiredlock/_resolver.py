"""Host names to addresses, kept out of the rounds: a cache with a bounded lifetime, lookups made
in the background, and a bounded wait for the first answer.

getaddrinfo() blocks for as long as the system resolver takes (seconds when a DNS server does not
answer) and cannot be cancelled. So no round calls it: each lookup runs in a short-lived daemon
thread of its own, at most one per (host, port) at a time, and a round only reads the cache.

- A numeric address (127.0.0.1, ::1) needs no lookup.
- A good answer is used for ANSWER_LIFETIME_S; after that it is looked up again in the background
  while the old answer still serves, for at most STALE_LIFETIME_S in all.
- A failed lookup is remembered for FAILURE_LIFETIME_S, then tried again.
- A caller waits (at most its `wait_s`) only for the first lookup of a name, and only if no earlier
  caller has waited for it: a resolver that never answers costs the first round that needs the
  name one master timeout, and the later rounds nothing. Refreshes and retries after a failure
  happen in the background while the last answer (or error) serves.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Sequence
from typing import NamedTuple, Optional, Union

ANSWER_LIFETIME_S = 30.0
STALE_LIFETIME_S = 300.0
FAILURE_LIFETIME_S = 1.0


class Address(NamedTuple):
    """A numeric address to connect to."""

    family: int  # socket.AF_INET or socket.AF_INET6
    host: str  # numeric: '127.0.0.1', '::1'
    port: int


Lookup = Union[Address, str]  # the address, or why there is none


def numeric_family(host: str) -> Optional[int]:
    """AF_INET or AF_INET6 when `host` is a numeric address, else None."""
    for family in (socket.AF_INET, socket.AF_INET6):
        try:
            socket.inet_pton(family, host)
        except (OSError, ValueError):
            continue
        return family
    return None


class _Entry:
    __slots__ = ("answer", "error", "fresh_until", "pending", "usable_until", "waited")

    def __init__(self) -> None:
        self.answer: Optional[Address] = None
        self.error = ""
        self.fresh_until = 0.0  # past this, a new lookup is started (the answer still serves)
        self.usable_until = 0.0  # past this, the answer is not used any more
        self.pending: Optional[threading.Event] = None  # set when the lookup in flight returns
        self.waited = False  # some caller already waited for the lookup in flight


_mutex = threading.Lock()
_entries: dict[tuple[str, int], _Entry] = {}


def _after_fork_in_child() -> None:
    # The lookup threads do not exist in the child: forget what they were doing, keep the answers.
    global _mutex
    _mutex = threading.Lock()
    for entry in _entries.values():
        entry.pending = None
        entry.waited = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _look_up(host: str, port: int, entry: _Entry, done: threading.Event) -> None:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, _kind, _proto, _name, sockaddr = infos[0]
        answer: Optional[Address] = Address(family, sockaddr[0], port)
        error = ""
    except (OSError, UnicodeError, IndexError) as exc:
        answer, error = None, f"cannot resolve {host!r}: {exc}"
    now = time.monotonic()
    with _mutex:
        if entry.pending is done:
            if answer is not None:
                entry.answer, entry.error = answer, ""
                entry.fresh_until = now + ANSWER_LIFETIME_S
                entry.usable_until = now + STALE_LIFETIME_S
            else:
                entry.answer, entry.error = None, error
                entry.fresh_until = now + FAILURE_LIFETIME_S
            entry.pending = None
            entry.waited = False
    done.set()


def _start(host: str, port: int, entry: _Entry) -> threading.Event:
    """Starts a lookup (the caller holds _mutex and has checked that none is in flight)."""
    done = entry.pending = threading.Event()
    thread = threading.Thread(
        target=_look_up, args=(host, port, entry, done), name="hiredlock-resolve", daemon=True
    )
    thread.start()
    return done


def _read(host: str, port: int, now: float) -> tuple[Optional[Lookup], Optional[threading.Event]]:
    """What the cache says now, starting a lookup when one is due; (answer, event to wait on)."""
    key = (host, port)
    with _mutex:
        entry = _entries.get(key)
        if entry is None:
            entry = _entries[key] = _Entry()
        if entry.pending is None and now >= entry.fresh_until:
            _start(host, port, entry)
        if entry.answer is not None and now < entry.usable_until:
            return entry.answer, None
        if entry.pending is not None and not entry.waited and not entry.error:
            # Nothing is known of this name yet: the first caller waits for the lookup. Later
            # lookups of it (refreshes, retries after a failure) happen in the background.
            entry.waited = True
            return None, entry.pending
        if entry.error:
            return entry.error, None
        return f"cannot resolve {host!r} yet: the lookup has not returned", None


def lookup_many(places: Sequence[tuple[str, int]], wait_s: float) -> list[Lookup]:
    """The addresses of (host, port) places; waits at most wait_s in all (see the module doc)."""
    now = time.monotonic()
    results: list[Optional[Lookup]] = []
    waits: list[tuple[int, threading.Event]] = []
    for index, (host, port) in enumerate(places):
        family = numeric_family(host)
        if family is not None:
            results.append(Address(family, host, port))
            continue
        answer, event = _read(host, port, now)
        results.append(answer)
        if event is not None:
            waits.append((index, event))
    if waits:
        deadline = now + max(wait_s, 0.0)
        for _index, event in waits:
            event.wait(max(0.0, deadline - time.monotonic()))
        later = time.monotonic()
        for index, _event in waits:
            host, port = places[index]
            results[index], _ = _read(host, port, later)
    return [result if result is not None else "no address" for result in results]


def lookup(host: str, port: int, wait_s: float) -> Lookup:
    """The address of host:port, or why there is none (see lookup_many)."""
    return lookup_many(((host, port),), wait_s)[0]


def prefetch(places: Sequence[tuple[str, int]]) -> None:
    """Starts the lookups these places will need, without waiting for them."""
    now = time.monotonic()
    for host, port in places:
        if numeric_family(host) is None:
            with _mutex:
                entry = _entries.get((host, port))
                if entry is None:
                    entry = _entries[(host, port)] = _Entry()
                if entry.pending is None and now >= entry.fresh_until:
                    _start(host, port, entry)
