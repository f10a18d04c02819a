"""Host names to addresses, kept out of the rounds: a cache with a bounded lifetime, lookups made
in the background, and a bounded wait for the first answer. A Sentinel group's current master is
looked up the same way, and so is any other answer a Source knows how to ask for (a Redis
Cluster's slot map: hiredlock._engines.cluster). A "place" is a (host, port) pair, a SentinelGroup
or a Source.

getaddrinfo() blocks for as long as the system resolver takes (seconds when a DNS server does not
answer) and cannot be cancelled. So no round calls it: each lookup runs in a short-lived daemon
thread of its own, at most one per (host, port) at a time, and a round only reads the cache.

- A numeric address (127.0.0.1, ::1) needs no lookup.
- A good answer is used for ANSWER_LIFETIME_S (a Sentinel group's: SENTINEL_ANSWER_LIFETIME_S, a
  Source's: its lifetime_s);
  after that it is looked up again in the background while the old answer still serves, for at
  most STALE_LIFETIME_S after it came. A lookup that fails meanwhile (a DNS server or the sentinels
  not answering) does not take it away: it serves until then all the same, to every caller (the
  cache is the process's: a client made during the outage gets it too); past that, the failure
  is the answer.
- A failed lookup is remembered for FAILURE_LIFETIME_S, then tried again.
- A caller waits (at most its `wait_s`) only for the first lookup of a name, and only if no earlier
  caller has waited for it: a resolver that never answers costs the first round that needs the
  name one master timeout, and the later rounds nothing. Refreshes and retries after a failure
  happen in the background while the last answer (or error) serves.
- refresh(place) starts a new lookup at once: the engines call it when a master they reached by a
  looked-up address failed them (its address may have moved: a failover, a DNS change).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any, ClassVar, NamedTuple, Optional, Protocol, Union, cast

from .._core.places import SentinelGroup
from .sentinel import SentinelLookupError, find_master

ANSWER_LIFETIME_S = 30.0
# A Sentinel group's master is asked again this often while rounds use it: after a failover the
# old master may stay writable (until the sentinels demote it, seconds later), and rounds must not
# keep taking locks there. (Its answer's stale lifetime is STALE_LIFETIME_S all the same.)
SENTINEL_ANSWER_LIFETIME_S = 1.0
# How often the engines compare a connected Sentinel master's address with the cache's.
SENTINEL_CHECK_S = 0.1
# How long an answer serves at most, counted from when it came, while the lookups after it fail.
STALE_LIFETIME_S = 300.0
FAILURE_LIFETIME_S = 1.0


class Address(NamedTuple):
    """A numeric address to connect to."""

    family: int  # socket.AF_INET or socket.AF_INET6
    host: str  # numeric: '127.0.0.1', '::1'
    port: int


class LookupFailed(Exception):
    """A Source's ask() found no answer; str() says why (each server's reason)."""


class Source(Protocol):
    """A place whose answer is not an address, asked by its own ask() in the lookup thread.
    Hashable (it is the cache's key) and not a tuple; str() names it in messages."""

    lifetime_s: ClassVar[float]  # how long a good answer is used before it is asked again

    def ask(self, last: Any) -> Any:
        """The answer (blocking); `last` is the last good answer or None. LookupFailed if none."""
        ...


Lookup = Union[Address, str]  # the address, or why there is none
Place = Union[tuple[str, int], SentinelGroup, Source]  # what is looked up


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
        self.answer: Optional[Any] = None  # the last good answer (an Address but for a Source's)
        self.error = ""  # why the last lookup failed ("" when it answered)
        self.fresh_until = 0.0  # past this, a new lookup is started (the answer still serves)
        self.usable_until = 0.0  # past this, the answer is not used any more (the error is)
        self.pending: Optional[threading.Event] = None  # set when the lookup in flight returns
        self.waited = False  # some caller already waited for the lookup in flight


_mutex = threading.Lock()
_entries: dict[Place, _Entry] = {}


def _after_fork_in_child() -> None:
    # The lookup threads do not exist in the child: forget what they were doing, keep the answers.
    global _mutex
    _mutex = threading.Lock()
    for entry in _entries.values():
        entry.pending = None
        entry.waited = False


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _address(host: str, port: int) -> Address:
    family = numeric_family(host)
    if family is not None:
        return Address(family, host, port)
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    family, _kind, _proto, _name, sockaddr = infos[0]
    return Address(family, str(sockaddr[0]), port)  # (a str: an AF_INET or AF_INET6 one)


def _ask(place: Place, last: Any) -> tuple[Optional[Any], str, float]:
    """(the answer or None, why there is none, how long the answer is fresh): blocks."""
    if not isinstance(place, (tuple, SentinelGroup)):
        try:
            return place.ask(last), "", place.lifetime_s
        except LookupFailed as exc:
            return None, str(exc), 0.0
    lifetime = ANSWER_LIFETIME_S
    if isinstance(place, SentinelGroup):
        lifetime = SENTINEL_ANSWER_LIFETIME_S
        try:
            host, port = find_master(place)
        except SentinelLookupError as exc:
            return None, str(exc), 0.0
    else:
        host, port = place
    try:
        return _address(host, port), "", lifetime
    except (OSError, UnicodeError, IndexError) as exc:
        return None, f"cannot resolve {host!r}: {exc}", 0.0


def _look_up(place: Place, entry: _Entry, done: threading.Event, last: Any) -> None:
    answer, error, lifetime = _ask(place, last)
    now = time.monotonic()
    with _mutex:
        if entry.pending is done:
            if answer is not None:
                entry.answer, entry.error = answer, ""
                entry.fresh_until = now + lifetime
                entry.usable_until = now + STALE_LIFETIME_S
            else:
                # (the last good answer, if any, still serves until its usable_until)
                entry.error = error
                entry.fresh_until = now + FAILURE_LIFETIME_S
            entry.pending = None
            entry.waited = False
    done.set()


def _start(place: Place, entry: _Entry) -> threading.Event:
    """Starts a lookup (the caller holds _mutex and has checked that none is in flight)."""
    done = entry.pending = threading.Event()
    thread = threading.Thread(
        target=_look_up,
        args=(place, entry, done, entry.answer),
        name="hiredlock-resolve",
        daemon=True,
    )
    thread.start()
    return done


def _entry(place: Place) -> _Entry:
    """The cache entry of `place` (the caller holds _mutex)."""
    entry = _entries.get(place)
    if entry is None:
        entry = _entries[place] = _Entry()
    return entry


def _what(place: Place) -> str:
    if isinstance(place, tuple):
        return repr(place[0])
    return f"the master of {place}" if isinstance(place, SentinelGroup) else str(place)


def _read(place: Place, now: float) -> tuple[Optional[Any], Optional[threading.Event]]:
    """What the cache says now, starting a lookup when one is due; (answer, event to wait on)."""
    with _mutex:
        entry = _entry(place)
        if entry.pending is None and now >= entry.fresh_until:
            _start(place, entry)
        if entry.answer is not None and now < entry.usable_until:
            return entry.answer, None
        if entry.pending is not None and not entry.waited and not entry.error:
            # Nothing is known of this name yet: the first caller waits for the lookup. Later
            # lookups of it (refreshes, retries after a failure) happen in the background.
            entry.waited = True
            return None, entry.pending
        if entry.error:
            return entry.error, None
        return f"cannot resolve {_what(place)} yet: the lookup has not returned", None


def _numeric(place: Place) -> Optional[Address]:
    if not isinstance(place, tuple):
        return None
    family = numeric_family(place[0])
    return None if family is None else Address(family, place[0], place[1])


def lookup_many(places: Sequence[Place], wait_s: float) -> list[Lookup]:
    """The addresses of these places; waits at most wait_s in all (see the module doc)."""
    return cast(list[Lookup], _answers(places, wait_s))


def answer(place: Source, wait_s: float) -> Any:
    """A Source's answer, or (a str) why there is none: waits as lookup_many does."""
    return _answers((place,), wait_s)[0]


def _answers(places: Sequence[Place], wait_s: float) -> list[Any]:
    now = time.monotonic()
    results: list[Optional[Any]] = []
    waits: list[tuple[int, threading.Event]] = []
    for index, place in enumerate(places):
        address = _numeric(place)
        if address is not None:
            results.append(address)
            continue
        answer, event = _read(place, now)
        results.append(answer)
        if event is not None:
            waits.append((index, event))
    if waits:
        deadline = now + max(wait_s, 0.0)
        for _index, event in waits:
            event.wait(max(0.0, deadline - time.monotonic()))
        later = time.monotonic()
        for index, _event in waits:
            results[index], _ = _read(places[index], later)
    return [result if result is not None else "no address" for result in results]


def lookup(host: str, port: int, wait_s: float) -> Lookup:
    """The address of host:port, or why there is none (see lookup_many)."""
    return lookup_many(((host, port),), wait_s)[0]


def prefetch(places: Sequence[Place]) -> None:
    """Starts the lookups these places will need, without waiting for them."""
    now = time.monotonic()
    for place in places:
        if _numeric(place) is None:
            with _mutex:
                entry = _entry(place)
                if entry.pending is None and now >= entry.fresh_until:
                    _start(place, entry)


def refresh(place: Place) -> None:
    """Looks `place` up again now, in the background (the last answer serves meanwhile)."""
    if _numeric(place) is not None:
        return
    with _mutex:
        entry = _entry(place)
        entry.fresh_until = 0.0
        if entry.pending is None:
            _start(place, entry)


def forget(place: Place) -> None:
    """Drops what the cache knows of `place` (a lookup in flight still ends, unread)."""
    with _mutex:
        _entries.pop(place, None)
