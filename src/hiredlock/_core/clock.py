"""The clocks the algorithm reads, in one place: the steps, the judgement and the lock state call
`clock.monotonic_ns()` (and a fair lock's order `clock.time_ns()`), never the time module, so that
a process may run them on another clock (the deterministic simulator, sim/, puts its virtual clock
here). A module attribute read costs what `time.monotonic_ns` did: the hot path is unchanged."""

from __future__ import annotations

import time
from typing import Callable

monotonic_ns: Callable[[], int] = time.monotonic_ns
time_ns: Callable[[], int] = time.time_ns
