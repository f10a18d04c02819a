"""The clocks the algorithm reads, in one place: the steps, the judgement and the lock state call
`monotonic_ns()` (and a fair lock's order `time_ns()`) from here, never the time module, so that
a process may run them on other clocks (the deterministic simulator, sim/, puts its virtual clock
in with use()).

Compiled (clock.pxd), the two are C functions that the hot modules cimport: a read of the clock is
a C call and one list read, where reading a module attribute before the call cost about 250
instructions, twice in every lock cycle.
"""

from __future__ import annotations

import time
from typing import Callable

Clock = Callable[[], int]

# The clocks in use: one-element lists, so that use() changes what every caller reads.
_monotonic: list[Clock] = [time.monotonic_ns]
_wall: list[Clock] = [time.time_ns]


def monotonic_ns() -> int:
    return _monotonic[0]()


def time_ns() -> int:
    return _wall[0]()


def use(monotonic: Clock, wall: Clock) -> tuple[Clock, Clock]:
    """Puts other clocks in (monotonic and wall, in ns); returns the ones they replace."""
    replaced = _monotonic[0], _wall[0]
    _monotonic[0], _wall[0] = monotonic, wall
    return replaced
