"""How every latency row is timed: rounds of k cycles, pytest-benchmark's pedantic mode.

A warm-up (connections opened, scripts cached, at least WARM_S seconds) estimates the cost t of one
call; then k is chosen so that one round lasts about ROUND_S, and as many rounds are run as fit in
BUDGET_S (at least MIN_ROUNDS). pytest-benchmark times each round; the report divides its median
by the cycles per round (`extra_info["cycles_per_round"]`). The same k-cycle loop is used for every
library (the C reference runs its k cycles inside one ctypes call).

Environment: BENCH_BUDGET (seconds per row, default 1.5), BENCH_ROUND_MS (default 2).
"""

from __future__ import annotations

import os
import time

BUDGET_S = float(os.environ.get("BENCH_BUDGET", "1.5"))
ROUND_S = float(os.environ.get("BENCH_ROUND_MS", "2")) / 1000
WARM_S = 0.2
MIN_ROUNDS = 30
MAX_ROUNDS = 20000


def estimate(call, warm_s: float = WARM_S, min_calls: int = 20) -> float:
    """Runs call() for warm_s seconds (and min_calls times at least); seconds per call, from the
    faster half of the warm-up (the first calls open connections)."""
    samples = []
    deadline = time.perf_counter() + warm_s
    while len(samples) < min_calls or time.perf_counter() < deadline:
        t0 = time.perf_counter()
        call()
        samples.append(time.perf_counter() - t0)
    samples.sort()
    half = samples[: max(1, len(samples) // 2)]
    return sum(half) / len(half)


def plan(
    per_call: float,
    budget_s: float = BUDGET_S,
    round_s: float = ROUND_S,
    min_rounds: int = MIN_ROUNDS,
):
    """(calls per round, rounds) for a call that costs per_call seconds."""
    k = max(1, round(round_s / max(per_call, 1e-9)))
    rounds = int(budget_s / (k * per_call))
    return k, max(min_rounds, min(MAX_ROUNDS, rounds))


def bench_rounds(
    benchmark,
    run,
    unit_cycles: int,
    extra: dict,
    budget_s: float = BUDGET_S,
    round_s: float = ROUND_S,
    min_calls: int = 20,
    min_rounds: int = MIN_ROUNDS,
):
    """Times rounds of run(k): k units of work, each worth unit_cycles acquire+release cycles.

    run(k) loops k times itself (for the C reference: inside one ctypes call), so nothing but the
    round's own start and stop is added to the k units. A unit that is long (1000 asyncio tasks'
    cycles: up to seconds) can lower the warm-up's calls and the rounds below their defaults.
    """
    per_unit = estimate(lambda: run(1), min_calls=min_calls)
    k, rounds = plan(per_unit, budget_s, round_s, min_rounds)
    benchmark.extra_info.update(extra)
    benchmark.extra_info["cycles_per_round"] = k * unit_cycles
    benchmark.extra_info["est_unit_s"] = per_unit
    benchmark.pedantic(
        run, args=(k,), rounds=rounds, iterations=1, warmup_rounds=min(5, rounds // 10)
    )
