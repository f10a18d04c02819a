"""The clocks the algorithm reads, in one place: the steps, the judgement and the lock state call
`monotonic_ns()` (and a fair lock's order `time_ns()`) from here, never the time module, so that
a process may run them on other clocks (the deterministic simulator, sim/, puts its virtual clock
in with use()).

Compiled (clock.pxd), the two are C functions that the hot modules cimport: a read of the clock is
a C call and one list read, where reading a module attribute before the call cost about 250
instructions, twice in every lock cycle. While the monotonic clock in use is time.monotonic_ns
(no use() has put another in) and that reads clock_gettime(CLOCK_MONOTONIC) (Linux, the BSDs),
the compiled monotonic_ns() reads that clock itself, without a Python call (about 250
instructions less per read).
"""

from __future__ import annotations

import time
from typing import Callable

try:
    import cython  # type: ignore[import-untyped]
except ImportError:  # uncompiled, without Cython installed: only `compiled` is read
    from types import SimpleNamespace

    cython = SimpleNamespace(compiled=False)

Clock = Callable[[], int]

# The clocks in use: one-element lists, so that use() changes what every caller reads.
_monotonic: list[Clock] = [time.monotonic_ns]
_wall: list[Clock] = [time.time_ns]

# time.monotonic_ns where the compiled monotonic_ns() may read its clock in C (None elsewhere)
_READ_IN_C = "clock_gettime(CLOCK_MONOTONIC)"
_c_readable = time.get_clock_info("monotonic").implementation == _READ_IN_C
_system_monotonic: Clock | None = time.monotonic_ns if _c_readable else None


def monotonic_ns() -> int:
    clock = _monotonic[0]
    if cython.compiled and clock is _system_monotonic:
        # (read_monotonic_ns is clock.pxd's C function: -1 where the platform has no such clock)
        now = cython.declare(cython.longlong)
        if read_monotonic_ns(cython.address(now)) == 0:  # type: ignore[name-defined]  # noqa: F821
            return now  # type: ignore[no-any-return]
    return clock()


def time_ns() -> int:
    return _wall[0]()


def use(monotonic: Clock, wall: Clock) -> tuple[Clock, Clock]:
    """Puts other clocks in (monotonic and wall, in ns); returns the ones they replace."""
    replaced = _monotonic[0], _wall[0]
    _monotonic[0], _wall[0] = monotonic, wall
    return replaced
