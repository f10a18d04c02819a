"""The deterministic simulation's speed: simulated lock lifetimes per second (sim/, from seed 0;
every kind and fault mixed, five or three masters in memory), for `make sim` and the CI check."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytest.importorskip("lupa")

from sim import campaign

LIFETIMES = 4_000


def test_sim_lifetimes_per_second(benchmark: pytest.FixtureRequest) -> None:
    summary = benchmark.pedantic(campaign.run, args=(LIFETIMES, 0), rounds=1, iterations=1)
    rate = summary.lifetimes / summary.seconds
    benchmark.extra_info["lifetimes_per_s"] = round(rate)  # type: ignore[attr-defined]
    print(f"\nsim: {rate:.0f} lifetimes/s ({summary.lifetimes} in {summary.seconds:.1f} s)")
    assert summary.lifetimes >= LIFETIMES
