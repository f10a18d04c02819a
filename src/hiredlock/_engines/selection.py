"""Picks the engine, in one place: HIREDLOCK_IMPL=native|python forces one, else native if it loads.

A forced engine that cannot load fails at import, loudly; the chosen engine names itself (.name).
Masters in memory (hiredlock.testing) have their own engine, "memory", whatever the default.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Optional

from .._core.errors import EngineUnavailable
from .._core.masters import MasterSpec
from .python_engine import PythonEngine
from .routing import RoutedEngines

BACKENDS = ("native", "python")
ENV_VAR = "HIREDLOCK_IMPL"

_native_error: Optional[BaseException] = None
try:
    from .._native import NativeEngine
except ImportError as exc:  # no compiler, no libhiredis, or HIREDLOCK_NO_EXTENSIONS at build time
    NativeEngine = None  # type: ignore[assignment,misc]
    _native_error = exc


def available_backends() -> tuple[str, ...]:
    """The engines that load in this process, fastest first."""
    return ("native", "python") if NativeEngine is not None else ("python",)


def memory_group(masters: Sequence[MasterSpec]) -> Optional[Any]:
    """The first master when the masters are in memory (hiredlock.testing: they are all or none,
    see parse_masters), else None."""
    if masters and masters[0].memory is not None:
        return masters[0].memory
    return None


def engine_class(backend: str, masters: Sequence[MasterSpec] = ()) -> Any:
    """The engine class for "native", "python" or "auto" (the process default); for masters in
    memory, their own engine (backend "auto" or "memory"); with a Redis Cluster among the
    masters, that class routed (see _engines/routing.py)."""
    chosen = _engine_class(backend, masters)
    if any(spec.cluster is not None for spec in masters):
        return RoutedEngines(chosen, masters)
    return chosen


def _engine_class(backend: str, masters: Sequence[MasterSpec]) -> type:
    memory = memory_group(masters)
    if memory is not None:
        engine = memory.engine_for(masters)  # (their engine checks they make one group)
        if backend not in ("auto", "memory"):
            raise ValueError(
                f"backend must be 'auto' or 'memory' for masters in memory, got {backend!r}"
            )
        return engine  # type: ignore[no-any-return]
    if backend == "memory":
        raise ValueError(
            "backend 'memory' is for masters in memory (hiredlock.testing.memory_masters)"
        )
    if backend == "auto":
        return DEFAULT_ENGINE
    if backend == "python":
        return PythonEngine
    if backend == "native":
        if NativeEngine is None:
            raise EngineUnavailable(
                f"the native engine cannot be loaded: {_native_error}. Reinstall hiredlock with "
                "libhiredis available (apt-get install libhiredis-dev pkg-config) or use "
                "backend='python'"
            )
        return NativeEngine
    if not isinstance(backend, str):
        raise TypeError(f"backend must be a str, not {type(backend).__name__}")
    raise ValueError(f"backend must be 'auto', 'native' or 'python', got {backend!r}")


def _default_engine() -> type:
    forced = os.environ.get(ENV_VAR, "").strip()
    if not forced:
        return NativeEngine if NativeEngine is not None else PythonEngine
    if forced not in BACKENDS:
        raise EngineUnavailable(f"{ENV_VAR}={forced!r}: expected 'native' or 'python'")
    return _engine_class(forced, ())


DEFAULT_ENGINE = _default_engine()
