"""What a client tells its observers: one Event for each thing a lock did, and why.

A client's observers are its own `on_event` callback (Redlock(..., on_event=f), AsyncRedlock too)
followed by the process-wide ones present when it was made (add_default_observer: what
hiredlock.otel.instrument() uses). Each is called with the Event, in the thread (or the event loop)
that did the thing: it must not block. One that raises is logged once (per observer and client)
and never breaks a lock.

With no observer, a lock pays one test per round (see Session.quiet_acquire: a healthy round's
votes, tested in C) and the steps build no Event; _core/observe.py has what they tell, and how.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Callable, Literal, NamedTuple, Optional

from .errors import Vote

EventKind = Literal[
    "acquired",
    "acquire_failed",
    "released",
    "extended",
    "renewed",
    "renewal_retried",
    "lost",
    "degraded",
]

# The calls a "degraded" event names as its `operation`.
Operation = Literal["acquire", "release", "extend", "renew"]


class Event(NamedTuple):
    """One thing a lock did.

    kind:      what happened (see EventKind).
    name:      the lock's name, as given (a semaphore's, a read-write lock's: the shared name; a
               multilock's: the tuple of its names).
    lock_kind: "Lock", "RLock", "FairLock", "Semaphore", "ReadLock", "WriteLock", "MultiLock".
    votes:     each master's answer in the round the event is about (one Vote per master).
    duration:  seconds the call took: acquired/acquire_failed, the whole wait (every attempt and
               pause); released/extended/renewed/renewal_retried, that round; else 0.0.
    attempts:  acquired/acquire_failed: the attempts made; else 0.
    held_for:  released (and lost): seconds from the acquire to the release (or the loss).
    reason:    acquire_failed: "not_acquired" (held by others until the caller gave up),
               "quorum_unreachable", "interrupted" or "closed"; lost, renewal_retried: why, in
               words; else None.
    operation: degraded: the call whose round it was ("acquire", "release", "extend", "renew");
               else None.
    """

    kind: EventKind
    name: str | bytes | tuple[str | bytes, ...]
    lock_kind: str
    votes: tuple[Vote, ...] = ()
    duration: float = 0.0
    attempts: int = 0
    held_for: float = 0.0
    reason: Optional[str] = None
    operation: Optional[Operation] = None


Observer = Callable[[Event], object]

_log = logging.getLogger("hiredlock.events")

_defaults: list[Observer] = []
_defaults_mutex = threading.Lock()


def add_default_observer(observer: Observer) -> None:
    """Every client made from now on tells `observer` too (after its own on_event)."""
    check_observer(observer, "observer")
    with _defaults_mutex:
        if observer not in _defaults:
            _defaults.append(observer)


def remove_default_observer(observer: Observer) -> None:
    """Clients made from now on no longer tell `observer` (those made before keep it)."""
    with _defaults_mutex:
        if observer in _defaults:
            _defaults.remove(observer)


def check_observer(observer: object, argument: str) -> None:
    if not callable(observer):
        raise TypeError(f"{argument} must be callable, not {type(observer).__name__}")


def observers_for(on_event: Optional[Observer]) -> tuple[Observer, ...]:
    """A new client's observers: its own on_event (checked), then the defaults of the moment."""
    if on_event is not None:
        check_observer(on_event, "on_event")
    with _defaults_mutex:
        defaults = tuple(_defaults)
    return defaults if on_event is None else (on_event, *defaults)


class Teller:
    """Calls a client's observers; remembers which ones raised, to log each only once."""

    __slots__ = ("_failed", "_observers")

    def __init__(self, observers: Sequence[Observer]) -> None:
        self._observers = tuple(observers)
        self._failed: set[int] = set()

    def __call__(self, event: Event) -> None:
        for observer in self._observers:
            try:
                observer(event)
            except Exception:
                if id(observer) not in self._failed:
                    self._failed.add(id(observer))
                    _log.exception(
                        "hiredlock: an event observer raised (on a %s event of %r); it is "
                        "still called, and this is logged once",
                        event.kind,
                        event.name,
                    )
