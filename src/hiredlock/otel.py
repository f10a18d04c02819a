"""OpenTelemetry metrics and spans for hiredlock's locks (the `otel` extra: opentelemetry-api).

    import hiredlock.otel
    hiredlock.otel.instrument()          # every client made from now on reports
    redlock = hiredlock.Redlock([...])

instrument() adds a process-wide event observer (hiredlock._core.events.add_default_observer)
that turns each client's Events into measurements on the global meter provider and spans on the
global tracer provider (opentelemetry.metrics / opentelemetry.trace, named "hiredlock" with the
library's version). Only clients made after instrument() report: one made before keeps the
observers it was made with, and so does one made before uninstrument(). Without an SDK (the API
alone) every instrument is a no-op. The names and attributes are listed in the docs' observability
page (https://hiredlock.readthedocs.io/en/latest/observability/#opentelemetry).
"""

from __future__ import annotations

import threading
from typing import Optional

try:
    from opentelemetry import metrics, trace
except ImportError as exc:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "hiredlock.otel needs the OpenTelemetry API: pip install 'hiredlock[otel]' "
        f"(opentelemetry-api could not be imported: {exc})"
    ) from exc

from . import __version__
from ._core.events import add_default_observer, remove_default_observer
from ._otel.observer import OtelObserver

__all__ = ["instrument", "instrumented", "uninstrument"]

_current: Optional[OtelObserver] = None
_mutex = threading.Lock()


def instrument(*, record_names: bool = False, spans: bool = True) -> None:
    """Report every client made from now on to OpenTelemetry's global providers.

    record_names: add each lock's name (`hiredlock.lock.name`) to its spans and measurements.
                  Off by default: lock names can carry user or tenant identifiers, and each
                  name is a time series of its own.
    spans:        make a span per acquire, release and extend (metrics are always recorded).

    Calling it again replaces the settings for clients made afterwards; a client never reports
    twice.
    """
    global _current
    if not isinstance(record_names, bool):
        raise TypeError(f"record_names must be a bool, not {type(record_names).__name__}")
    if not isinstance(spans, bool):
        raise TypeError(f"spans must be a bool, not {type(spans).__name__}")
    observer = OtelObserver(
        metrics.get_meter("hiredlock", __version__),
        trace.get_tracer("hiredlock", __version__) if spans else None,
        record_names=record_names,
    )
    with _mutex:
        if _current is not None:
            remove_default_observer(_current)
        _current = observer
        add_default_observer(observer)


def uninstrument() -> None:
    """Clients made from now on no longer report (those made before keep reporting)."""
    global _current
    with _mutex:
        if _current is not None:
            remove_default_observer(_current)
            _current = None


def instrumented() -> bool:
    """Whether clients made now would report to OpenTelemetry."""
    return _current is not None
