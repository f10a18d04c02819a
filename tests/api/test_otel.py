"""hiredlock.otel: the clients' events reach OpenTelemetry's global meter and tracer providers as
metrics and spans, on real masters, both engines and both APIs; lock names only when asked.

The SDK's in-memory reader (delta temporality: each collection holds what happened since the
previous one) and span exporter are the global providers for the whole test session, since
OpenTelemetry refuses to replace a global provider once set.
"""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Any

import pytest
from apis import make_redlock_fixture, pytest_generate_tests  # noqa: F401  (sync and async APIs)
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import (
    Counter,
    Histogram,
    MeterProvider,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from support import set_foreign, urls

import hiredlock.otel
from hiredlock import Event, LockLost, Outcome, Vote
from hiredlock._otel.observer import OtelObserver, error_type, master_attributes

DELTA = AggregationTemporality.DELTA


class Telemetry:
    """What the process reported since the last drain(): metric points and finished spans."""

    def __init__(self, reader: InMemoryMetricReader, exporter: InMemorySpanExporter) -> None:
        self.reader = reader
        self.exporter = exporter
        self._points: list[tuple[str, dict[str, Any], Any]] = []

    def drain(self) -> None:
        self.reader.get_metrics_data()
        self.exporter.clear()
        self._points = []

    def collect(self) -> None:
        data = self.reader.get_metrics_data()
        for resource in data.resource_metrics if data else ():
            for scope in resource.scope_metrics:
                if scope.scope.name != "hiredlock":
                    continue
                for metric in scope.metrics:
                    for point in metric.data.data_points:
                        self._points.append((metric.name, dict(point.attributes), point))

    def points(self, name: str, **attributes: Any) -> list[tuple[dict[str, Any], Any]]:
        """The points of metric `name` whose attributes include `attributes` (dots as '_')."""
        wanted = {key.replace("_", "."): value for key, value in attributes.items()}
        return [
            (attrs, point)
            for metric, attrs, point in self._points
            if metric == name and all(attrs.get(k) == v for k, v in wanted.items())
        ]

    def all_points(self) -> list[tuple[str, dict[str, Any], Any]]:
        return list(self._points)

    def spans(self, name: str | None = None) -> list[Any]:
        return [s for s in self.exporter.get_finished_spans() if name is None or s.name == name]


@pytest.fixture(scope="session")
def _providers() -> Telemetry:
    reader = InMemoryMetricReader(
        preferred_temporality={
            kind: DELTA
            for kind in (
                Counter,
                UpDownCounter,
                Histogram,
                ObservableCounter,
                ObservableUpDownCounter,
                ObservableGauge,
            )
        }
    )
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return Telemetry(reader, exporter)


@pytest.fixture
def otel(_providers):
    """The session's telemetry, emptied; hiredlock.otel is uninstrumented after the test."""
    hiredlock.otel.uninstrument()
    _providers.drain()
    yield _providers
    hiredlock.otel.uninstrument()


def total(points: list[tuple[dict[str, Any], Any]]) -> float:
    return sum(getattr(point, "value", None) or getattr(point, "sum", 0) for _, point in points)


def count(points: list[tuple[dict[str, Any], Any]]) -> int:
    return sum(point.count for _, point in points)


# -- end to end, on real masters ------------------------------------------------------------------


def test_contended_acquire_records_attempts_and_wait(engine, make_redlock, masters5, key, otel):
    hiredlock.otel.instrument()
    redlock = make_redlock(urls(masters5), retry_delay=0.05)
    set_foreign(masters5, key, px=400)  # another holder, everywhere, for 0.4 s: no release notice
    lock = redlock.lock(key, 5)
    t0 = time.monotonic()
    assert lock.acquire(timeout=30)
    waited = time.monotonic() - t0
    lock.release()
    otel.collect()

    waits = otel.points("hiredlock.lock.acquire.duration", hiredlock_outcome="acquired")
    assert count(waits) == 1, otel.all_points()
    assert 0 < total(waits) <= waited
    attempts = otel.points("hiredlock.lock.acquire.attempts", hiredlock_outcome="acquired")
    assert count(attempts) == 1 and total(attempts) > 1, attempts
    (span,) = otel.spans("hiredlock.acquire")
    assert span.attributes["hiredlock.outcome"] == "acquired"
    assert span.attributes["hiredlock.acquire.attempts"] == total(attempts)
    assert span.attributes["hiredlock.lock.kind"] == "Lock"
    assert span.status.status_code is StatusCode.UNSET
    assert abs((span.end_time - span.start_time) / 1e9 - total(waits)) < 1e-3


def test_release_records_hold_time_and_a_healthy_run_no_error(
    engine, make_redlock, masters5, key, otel
):
    hiredlock.otel.instrument()
    redlock = make_redlock(urls(masters5))
    lock = redlock.lock(key, 5)
    t0 = time.monotonic()
    assert lock.acquire(blocking=False)
    lock.extend(5)
    lock.release()
    elapsed = time.monotonic() - t0
    otel.collect()

    holds = otel.points("hiredlock.lock.hold.duration", hiredlock_outcome="released")
    assert count(holds) == 1, otel.all_points()
    assert 0 < total(holds) <= elapsed
    assert [s.name for s in otel.spans()] == [
        "hiredlock.acquire",
        "hiredlock.extend",
        "hiredlock.release",
    ]
    for span in otel.spans():
        assert span.status.status_code is StatusCode.UNSET
        assert "hiredlock.votes" not in span.attributes  # every master said OK
    assert not otel.points("hiredlock.master.errors")
    assert not otel.points("hiredlock.round.degraded")
    assert not otel.points("hiredlock.lock.lost")


def test_failed_acquire_is_an_error_span(engine, make_redlock, masters5, key, otel):
    hiredlock.otel.instrument()
    redlock = make_redlock(urls(masters5))
    set_foreign(masters5, key)
    assert not redlock.lock(key, 5).acquire(blocking=False)
    otel.collect()

    (span,) = otel.spans("hiredlock.acquire")
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["error.type"] == "not_acquired"
    assert span.attributes["hiredlock.outcome"] == "not_acquired"
    said = [vote.rpartition(": ")[2] for vote in span.attributes["hiredlock.votes"]]
    assert said.count("TAKEN") >= 3 and "OK" not in said, said  # (the rest: not waited for)
    waits = otel.points("hiredlock.lock.acquire.duration", hiredlock_outcome="not_acquired")
    assert count(waits) == 1 and waits[0][0]["error.type"] == "not_acquired", otel.all_points()


def test_killed_master_counts_master_errors_and_degraded_rounds(
    engine, make_redlock, masters5, key, otel
):
    hiredlock.otel.instrument()
    redlock = make_redlock(urls(masters5))
    dead = masters5[0]
    dead.kill()
    # A first cycle finds the master gone (an acquire's first round may decide on the others'
    # answers before its connection is refused); the second one is measured.
    with redlock.lock(key + ":first", 5):
        pass
    otel.drain()
    lock = redlock.lock(key, 5)
    assert lock.acquire(blocking=False)
    lock.release()
    otel.collect()

    errors = otel.points("hiredlock.master.errors", server_port=dead.port)
    assert errors, otel.all_points()
    for attributes, _ in errors:
        assert attributes["db.system.name"] == "redis"
        assert attributes["server.address"] in ("127.0.0.1", "localhost")
        assert attributes["error.type"] in ("conn_error", "timeout")
    assert {attrs["hiredlock.operation"] for attrs, _ in errors} == {"acquire", "release"}
    assert not [p for p in otel.points("hiredlock.master.errors") if p not in errors]
    for operation in ("acquire", "release"):
        degraded = otel.points("hiredlock.round.degraded", hiredlock_operation=operation)
        assert total(degraded) == 1, otel.all_points()
    acquire, release = otel.spans()
    for span in (acquire, release):
        assert len(span.attributes["hiredlock.votes"]) == 5
        assert span.attributes["hiredlock.votes"][0].startswith(dead.url + ": ")
        assert span.status.status_code is StatusCode.UNSET  # the call succeeded


def test_lock_found_lost_on_release(engine, make_redlock, masters5, key, otel):
    hiredlock.otel.instrument()
    redlock = make_redlock(urls(masters5))
    lock = redlock.lock(key, 5)
    assert lock.acquire(blocking=False)
    set_foreign(masters5, key)  # someone else holds it everywhere now
    with pytest.raises(LockLost):
        lock.release()
    otel.collect()

    assert total(otel.points("hiredlock.lock.lost", hiredlock_lock_kind="Lock")) == 1
    assert count(otel.points("hiredlock.lock.hold.duration", hiredlock_outcome="lost")) == 1
    assert not otel.points("hiredlock.lock.hold.duration", hiredlock_outcome="released")
    (span,) = otel.spans("hiredlock.lost")
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["error.type"] == "lock_lost"
    assert all(v.endswith(": TAKEN") for v in span.attributes["hiredlock.votes"]), span.attributes
    assert not otel.spans("hiredlock.release")


def test_names_only_when_asked(engine, make_redlock, masters5, key, otel):
    hiredlock.otel.instrument()
    quiet = make_redlock(urls(masters5))
    hiredlock.otel.instrument(record_names=True)
    named = make_redlock(urls(masters5))
    with quiet.lock(key + ":quiet", 5):
        pass
    with named.lock(key + ":named", 5):
        pass
    otel.collect()

    names = {attrs.get("hiredlock.lock.name") for _, attrs, _ in otel.all_points()}
    assert names == {None, key + ":named"}, names
    spans = otel.spans()
    assert len(spans) == 4  # acquire and release of each: the first observer was replaced
    assert {s.attributes.get("hiredlock.lock.name") for s in spans} == {None, key + ":named"}
    for span in spans:
        assert key + ":quiet" not in repr(dict(span.attributes))


def test_a_multilock_is_named_by_its_names(engine, make_redlock, masters5, key, otel):
    hiredlock.otel.instrument(record_names=True)
    names = (key + ":a", key.encode() + b":b\xff")
    with make_redlock(urls(masters5)).multilock(names, 5):
        pass
    otel.collect()

    shown = (key + ":a", key + ":b\\xff")  # bytes that are not UTF-8: escaped
    acquire, release = otel.spans()
    for span in (acquire, release):
        assert span.attributes["hiredlock.lock.kind"] == "MultiLock"
        assert span.attributes["hiredlock.lock.name"] == shown
    (hold,) = otel.points("hiredlock.lock.hold.duration", hiredlock_lock_kind="MultiLock")
    assert hold[0]["hiredlock.lock.name"] == shown


def test_uninstrument_stops_reporting_for_new_clients(engine, make_redlock, masters5, key, otel):
    hiredlock.otel.instrument()
    before = make_redlock(urls(masters5))
    hiredlock.otel.uninstrument()
    assert not hiredlock.otel.instrumented()
    after = make_redlock(urls(masters5))
    with after.lock(key + ":after", 5):
        pass
    otel.collect()
    assert not otel.spans() and not otel.all_points()

    with before.lock(key + ":before", 5):  # made while instrumented: keeps reporting
        pass
    otel.collect()
    assert [s.name for s in otel.spans()] == ["hiredlock.acquire", "hiredlock.release"]


def test_spans_can_be_left_out(engine, make_redlock, masters5, key, otel):
    hiredlock.otel.instrument(spans=False)
    with make_redlock(urls(masters5)).lock(key, 5):
        pass
    otel.collect()
    assert not otel.spans()
    assert count(otel.points("hiredlock.lock.hold.duration")) == 1


# -- the observer fed Events directly: what no healthy run on real masters gives ------------------


def observer(record_names: bool = False) -> OtelObserver:
    return OtelObserver(
        metrics.get_meter("hiredlock"), trace.get_tracer("hiredlock"), record_names=record_names
    )


def test_lost_lock_is_counted_with_its_hold_time_and_an_error_span(otel):
    votes = (
        Vote("redis://10.0.0.1:6379/0", Outcome.TAKEN),
        Vote("redis://[::1]:6380/0", Outcome.TIMEOUT),
        Vote("unix:///run/redis.sock?db=0", Outcome.ERROR, "READONLY You can't write"),
    )
    observer()(Event("lost", "orders", "Lock", votes, held_for=2.5, reason="expired"))
    otel.collect()

    assert total(otel.points("hiredlock.lock.lost", hiredlock_lock_kind="Lock")) == 1
    (hold,) = otel.points("hiredlock.lock.hold.duration", hiredlock_outcome="lost")
    assert hold[1].sum == 2.5
    (span,) = otel.spans("hiredlock.lost")
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "expired"
    errors = {
        (attrs["server.address"], attrs.get("server.port"), attrs["error.type"])
        for attrs, _ in otel.points("hiredlock.master.errors")
    }
    assert errors == {("::1", 6380, "timeout"), ("/run/redis.sock", None, "READONLY")}


def test_renewals_are_metrics_only(otel):
    vote = Vote("redis://127.0.0.1:6379/0", Outcome.CONN_ERROR, "connection refused")
    watch = observer()
    watch(Event("renewed", b"jobs:\xff", "Semaphore", (vote,), duration=0.01))
    watch(Event("renewal_retried", b"jobs:\xff", "Semaphore", (vote,), reason="no quorum"))
    otel.collect()

    assert not otel.spans()
    renewals = otel.points("hiredlock.lock.renewals", hiredlock_lock_kind="Semaphore")
    assert sorted(attrs["hiredlock.outcome"] for attrs, _ in renewals) == ["renewed", "retried"]
    errors = otel.points("hiredlock.master.errors", hiredlock_operation="renew")
    assert total(errors) == 2 and errors[0][0]["error.type"] == "conn_error"


def test_degraded_counts_the_round_not_its_masters_again(otel):
    vote = Vote("redis://127.0.0.1:6379/0", Outcome.TIMEOUT)
    watch = observer(record_names=True)
    watch(Event("extended", "k", "RLock", (vote,), duration=0.002))
    watch(Event("degraded", "k", "RLock", (vote,), operation="extend"))
    otel.collect()

    (degraded,) = otel.points("hiredlock.round.degraded")
    assert degraded[0] == {
        "hiredlock.lock.kind": "RLock",
        "hiredlock.lock.name": "k",
        "hiredlock.operation": "extend",
    }
    assert total(otel.points("hiredlock.master.errors", hiredlock_operation="extend")) == 1


@pytest.mark.parametrize(
    ("master", "expected"),
    [
        ("redis://db1.internal:6380/2", {"server.address": "db1.internal", "server.port": 6380}),
        ("rediss://[2001:db8::1]:6379/0", {"server.address": "2001:db8::1", "server.port": 6379}),
        ("unix:///run/redis.sock?db=0", {"server.address": "/run/redis.sock"}),
        (
            "redis+sentinel://s1:26379,s2:26379/main/0",
            {"server.address": "redis+sentinel://s1:26379,s2:26379/main/0"},
        ),
    ],
)
def test_a_master_is_named_by_the_redis_conventions(master, expected):
    assert master_attributes(master) == {"db.system.name": "redis", **expected}


@pytest.mark.parametrize(
    ("outcome", "detail", "expected"),
    [
        (Outcome.TIMEOUT, None, "timeout"),
        (Outcome.CONN_ERROR, "Connection refused", "conn_error"),
        (Outcome.ERROR, "NOPERM this user has no permissions", "NOPERM"),
        (Outcome.ERROR, "OOM", "OOM"),
        (Outcome.ERROR, "Something unexpected", "error"),
        (Outcome.ERROR, "READONLYISH reply", "READONLYISH"),
        (Outcome.ERROR, None, "error"),
    ],
)
def test_a_failed_master_error_type(outcome, detail, expected):
    assert error_type(outcome, detail) == expected


def test_instrument_checks_its_arguments(otel):
    with pytest.raises(TypeError, match="record_names"):
        hiredlock.otel.instrument(record_names="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="spans"):
        hiredlock.otel.instrument(spans=1)  # type: ignore[arg-type]
    assert not hiredlock.otel.instrumented()


def test_hiredlock_imports_without_opentelemetry():
    """Only hiredlock.otel needs the extra, and its ImportError names it."""
    script = """
import sys
class Hide:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ImportError("hidden for the test: " + name)
sys.meta_path.insert(0, Hide())
import hiredlock
try:
    import hiredlock.otel
except ImportError as exc:
    print("ImportError:", exc)
"""
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=60
    )
    assert "ImportError: hiredlock.otel needs the OpenTelemetry API" in result.stdout
    assert "hiredlock[otel]" in result.stdout
