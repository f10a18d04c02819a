"""Runs seeds until enough lock lifetimes were simulated; sums what was exercised."""

from __future__ import annotations

import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional, TextIO

from .checks import Violation
from .lifetimes import Sim

LIFETIMES_PER_SEED = 40


@dataclass
class Summary:
    seeds: int = 0
    lifetimes: int = 0
    seconds: float = 0.0
    virtual_s: float = 0.0
    faults: Counter[str] = field(default_factory=Counter)
    outcomes: Counter[str] = field(default_factory=Counter)
    noscript: int = 0

    def add(self, sim: Sim) -> None:
        self.seeds += 1
        self.lifetimes += sim.started
        self.faults.update(sim.faults)
        self.outcomes.update(sim.outcomes)
        self.noscript += sim.world.stats["noscript"]
        self.virtual_s += (sim.world.now - 10**9) / 1e9

    def text(self) -> str:
        rate = self.lifetimes / self.seconds if self.seconds else 0.0
        lines = [
            f"{self.lifetimes} lifetimes over {self.seeds} seeds in {self.seconds:.1f} s "
            f"({rate:.0f} lifetimes/s; {self.virtual_s:.0f} virtual s)",
            "faults hit: " + ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())),
            "outcomes:   " + ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items())),
            f"NOSCRIPT resends: {self.noscript}",
        ]
        return "\n".join(lines)


def run(
    lifetimes: int,
    seed: int = 0,
    per_seed: int = LIFETIMES_PER_SEED,
    progress: Optional[TextIO] = None,
) -> Summary:
    """Seeds seed, seed + 1, ... until `lifetimes` lifetimes ran; a violated invariant raises
    checks.Violation (its message names the seed that replays it)."""
    summary = Summary()
    began = time.perf_counter()
    shown = 0.0
    current = seed
    while summary.lifetimes < lifetimes:
        n = min(per_seed, lifetimes - summary.lifetimes)
        sim = Sim(current, n)
        try:
            sim.run()
        except Violation as violation:
            violation.args = (
                f"{violation} (replays: python -m sim --seed {current} --lifetimes {n} "
                f"--per-seed {n})",
            )
            raise
        summary.add(sim)
        current += 1
        now = time.perf_counter()
        if progress is not None and (now - shown > 0.5 or summary.lifetimes >= lifetimes):
            shown = now
            done = min(1.0, summary.lifetimes / lifetimes)
            bar = "#" * int(done * 40)
            rate = summary.lifetimes / (now - began)
            progress.write(
                f"\r[{bar:<40}] {summary.lifetimes}/{lifetimes} lifetimes, seed {current - 1}, "
                f"{rate:.0f}/s"
            )
            progress.flush()
    summary.seconds = time.perf_counter() - began
    if progress is not None:
        progress.write("\n")
    return summary


if __name__ == "__main__":  # pragma: no cover
    print(run(int(sys.argv[1]), progress=sys.stderr).text())
