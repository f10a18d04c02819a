"""The event observer behind hiredlock.otel.instrument(): each Event becomes measurements on a
meter and, for acquire, release and extend, a span made after the fact (the Event carries how long
the call took). It needs nothing from the engines: everything it reports is in the Events."""

from __future__ import annotations

import re
import time
from typing import Callable, Optional, Union
from urllib.parse import urlsplit

from opentelemetry.metrics import Histogram, Meter
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer

from .._core.errors import Vote
from .._core.events import Event, EventKind
from .._core.scripts import FAILURES, Outcome

AttributeValue = Union[str, int, bool, tuple[str, ...]]
Attributes = dict[str, AttributeValue]

# OpenTelemetry's recommended boundaries for durations in seconds, stretched for hold times
# (locks are held for minutes too).
WAIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
HOLD_BUCKETS = (*WAIT_BUCKETS, 30.0, 60.0, 300.0, 900.0, 3600.0)
ATTEMPT_BUCKETS = (1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0, 100.0, 1000.0)

# The call whose round an event is about (a degraded event names its own).
OPERATION: dict[EventKind, Optional[str]] = {
    "acquired": "acquire",
    "acquire_failed": "acquire",
    "released": "release",
    "extended": "extend",
    "renewed": "renew",
    "renewal_retried": "renew",
    "lost": None,
    "degraded": None,
}
ACQUIRE_KINDS = frozenset({"acquired", "acquire_failed"})
SPAN_NAMES: dict[EventKind, str] = {
    "acquired": "hiredlock.acquire",
    "acquire_failed": "hiredlock.acquire",
    "released": "hiredlock.release",
    "extended": "hiredlock.extend",
    "lost": "hiredlock.lost",
}

_ERROR_PREFIX = re.compile(r"[A-Z][A-Z_]+(?=\s|$)")


def master_attributes(master: str) -> Attributes:
    """server.address/server.port of a master named as in a Vote (its URL, never credentials):
    host and port for TCP, the socket's path for a Unix socket, the name itself otherwise (a
    Sentinel group, a memory master)."""
    attributes: Attributes = {"db.system.name": "redis"}
    try:
        parts = urlsplit(master)
        if parts.scheme in ("redis", "rediss") and parts.hostname:
            attributes["server.address"] = parts.hostname
            if parts.port is not None:
                attributes["server.port"] = parts.port
            return attributes
        if parts.scheme == "unix" and parts.path:
            attributes["server.address"] = parts.path
            return attributes
    except ValueError:  # a port out of range, a malformed address: the name as it is
        pass
    attributes["server.address"] = master
    return attributes


def error_type(outcome: Outcome, detail: Optional[str]) -> str:
    """`error.type` of a failed master: "timeout", "conn_error", or the error reply's prefix
    (READONLY, NOAUTH, OOM, ...) when it has one, else "error"."""
    if outcome is Outcome.ERROR and detail:
        prefix = _ERROR_PREFIX.match(detail)
        if prefix is not None:
            return prefix.group()
    return outcome.name.lower()


def notable(vote: Vote, kind: EventKind) -> bool:
    """A vote worth showing on a span that succeeded: a master that failed, or one not waited for
    in a release or an extend (which wait for every master that keeps up; an acquire stops
    waiting once a quorum decided, so there a master not waited for was merely slower)."""
    outcome = vote.outcome
    return outcome in FAILURES or (outcome is Outcome.SKIPPED and kind not in ACQUIRE_KINDS)


def shown_name(name: Union[str, bytes, tuple[Union[str, bytes], ...]]) -> AttributeValue:
    """A lock's name as an attribute: a string (bytes decoded, undecodable bytes escaped), or a
    multilock's names as an array of strings."""
    if isinstance(name, tuple):
        return tuple(_text(part) for part in name)
    return _text(name)


def _text(name: Union[str, bytes]) -> str:
    return name if isinstance(name, str) else name.decode("utf-8", "backslashreplace")


def _histogram(
    meter: Meter, name: str, unit: str, description: str, buckets: tuple[float, ...]
) -> Histogram:
    # explicit_bucket_boundaries_advisory: opentelemetry-api 1.23 and later (the extra's floor)
    return meter.create_histogram(
        name,
        unit=unit,
        description=description,
        explicit_bucket_boundaries_advisory=buckets,
    )


class OtelObserver:
    """Called with each Event of the clients made while it is a default observer."""

    __slots__ = (
        "_acquire_duration",
        "_attempts",
        "_cached",
        "_degraded",
        "_handlers",
        "_hold_duration",
        "_lost",
        "_master_errors",
        "_masters",
        "_record_names",
        "_renewals",
        "_tracer",
    )

    def __init__(self, meter: Meter, tracer: Optional[Tracer], *, record_names: bool) -> None:
        self._record_names = record_names
        self._tracer = tracer
        self._masters: dict[str, Attributes] = {}
        self._cached: dict[tuple[str, tuple[tuple[str, str], ...]], Attributes] = {}
        self._acquire_duration: Histogram = _histogram(
            meter,
            "hiredlock.lock.acquire.duration",
            "s",
            "How long acquire calls took, every attempt and pause included",
            WAIT_BUCKETS,
        )
        self._attempts: Histogram = _histogram(
            meter,
            "hiredlock.lock.acquire.attempts",
            "{attempt}",
            "How many attempts (rounds on the masters) acquire calls made",
            ATTEMPT_BUCKETS,
        )
        self._hold_duration: Histogram = _histogram(
            meter,
            "hiredlock.lock.hold.duration",
            "s",
            "How long locks were held, from acquire to release (or to their loss)",
            HOLD_BUCKETS,
        )
        self._lost = meter.create_counter(
            "hiredlock.lock.lost", unit="{lock}", description="Locks found lost by their holder"
        )
        self._renewals = meter.create_counter(
            "hiredlock.lock.renewals",
            unit="{renewal}",
            description="Automatic renewals, done (renewed) or to be retried (retried)",
        )
        self._master_errors = meter.create_counter(
            "hiredlock.master.errors",
            unit="{error}",
            description="Masters that failed a round: timed out, lost the connection or replied "
            "with an error",
        )
        self._degraded = meter.create_counter(
            "hiredlock.round.degraded",
            unit="{round}",
            description="Rounds that succeeded while a master failed or was not waited for",
        )
        self._handlers: dict[EventKind, Callable[[Event], None]] = {
            "acquired": self._acquire,
            "acquire_failed": self._acquire,
            "released": self._released,
            "extended": self._extended,
            "renewed": self._renewal,
            "renewal_retried": self._renewal,
            "lost": self._lost_lock,
            "degraded": self._degraded_round,
        }

    def __call__(self, event: Event) -> None:
        handler = self._handlers.get(event.kind)
        if handler is None:  # a kind of event this version does not report
            return
        handler(event)
        # A degraded event is about the round of the event it goes with: its failed masters
        # are counted there, once.
        if event.kind != "degraded":
            self._count_master_errors(event, OPERATION.get(event.kind))

    # -- one handler per kind of event -------------------------------------------------------------

    def _acquire(self, event: Event) -> None:
        if event.kind == "acquired":
            attributes = self._attributes(event, (("hiredlock.outcome", "acquired"),))
            failure = None
        else:
            failure = event.reason or "not_acquired"
            attributes = self._attributes(
                event, (("hiredlock.outcome", failure), ("error.type", failure))
            )
        self._acquire_duration.record(event.duration, attributes)
        self._attempts.record(event.attempts, attributes)
        if self._tracer is not None:
            self._span(event, attributes, failure)

    def _released(self, event: Event) -> None:
        attributes = self._attributes(event, (("hiredlock.outcome", "released"),))
        self._hold_duration.record(event.held_for, attributes)
        if self._tracer is not None:
            self._span(event, attributes, None)

    def _extended(self, event: Event) -> None:
        if self._tracer is not None:
            self._span(event, self._attributes(event, (("hiredlock.outcome", "extended"),)), None)

    def _renewal(self, event: Event) -> None:
        outcome = "renewed" if event.kind == "renewed" else "retried"
        self._renewals.add(1, self._attributes(event, (("hiredlock.outcome", outcome),)))

    def _lost_lock(self, event: Event) -> None:
        self._lost.add(1, self._attributes(event, ()))
        attributes = self._attributes(event, (("hiredlock.outcome", "lost"),))
        self._hold_duration.record(event.held_for, attributes)
        if self._tracer is not None:
            self._span(event, attributes, "lock_lost")

    def _degraded_round(self, event: Event) -> None:
        operation = () if event.operation is None else (("hiredlock.operation", event.operation),)
        self._degraded.add(1, self._attributes(event, operation))

    # -- shared --------------------------------------------------------------------------------

    def _attributes(self, event: Event, extra: tuple[tuple[str, str], ...]) -> Attributes:
        """The lock's kind (and name, if recorded) with `extra`: one dict per combination,
        made once, when names are not recorded (never changed after: the SDK copies them)."""
        if self._record_names:
            return {
                "hiredlock.lock.kind": event.lock_kind,
                "hiredlock.lock.name": shown_name(event.name),
                **dict(extra),
            }
        key = (event.lock_kind, extra)
        attributes = self._cached.get(key)
        if attributes is None:
            if len(self._cached) >= 256:  # (lock kinds and outcomes are few: never, in practice)
                self._cached.clear()
            attributes = self._cached[key] = {"hiredlock.lock.kind": event.lock_kind, **dict(extra)}
        return attributes

    def _count_master_errors(self, event: Event, operation: Optional[str]) -> None:
        for vote in event.votes:
            if vote.outcome not in FAILURES:
                continue
            master = self._masters.get(vote.master)
            if master is None:
                if len(self._masters) >= 256:
                    self._masters.clear()
                master = self._masters[vote.master] = master_attributes(vote.master)
            attributes = {**master, "error.type": error_type(vote.outcome, vote.detail)}
            if operation is not None:
                attributes["hiredlock.operation"] = operation
            self._master_errors.add(1, attributes)

    def _span(self, event: Event, attributes: Attributes, failure: Optional[str]) -> None:
        """The span of a call that has just ended: it started `event.duration` ago. What only a
        recorded span shows (attempts, the votes of a round that was not all OK, the status) is
        added only when the span is recorded."""
        assert self._tracer is not None
        end = time.time_ns()
        span = self._tracer.start_span(
            SPAN_NAMES[event.kind],
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=end - int(event.duration * 1e9),
        )
        if span.is_recording():
            if event.kind in ACQUIRE_KINDS:
                span.set_attribute("hiredlock.acquire.attempts", event.attempts)
            if failure is not None or any(notable(vote, event.kind) for vote in event.votes):
                span.set_attribute("hiredlock.votes", tuple(str(vote) for vote in event.votes))
            if failure is not None:
                span.set_attribute("error.type", failure)
                span.set_status(Status(StatusCode.ERROR, event.reason or failure))
        span.end(end_time=end)
