"""The soak nemesis: every 0.5-2 s it faults at most `max_faulted` masters at once, heals each
fault when its time is up, and heals everything when stopped.  Every step goes to the masters'
fault schedule (with the seed, for the dumps)."""

from __future__ import annotations

import random
import threading
import time


class Nemesis(threading.Thread):
    def __init__(self, masters, make_fault, seed: int, max_faulted: int = 2, every=(0.5, 2.0)):
        super().__init__(daemon=True, name="nemesis")
        self.masters = masters
        self.make_fault = make_fault  # rng -> (fault with apply/heal, duration in seconds)
        self.rng = random.Random(seed)
        self.seed = seed
        self.max_faulted = max_faulted
        self.every = every
        self.stopping = threading.Event()
        self.active: list[tuple[object, list[int], float]] = []
        self.applied = 0
        self.errors: list[str] = []
        self.max_seen = 0

    def _heal(self, fault, idx) -> None:
        try:
            fault.heal(self.masters, idx)
        except Exception as exc:  # reported by the test; the final heal retries everything
            self.errors.append(f"heal {fault} {idx}: {exc!r}")
            self.masters.log(f"nemesis: heal {fault} {idx} failed: {exc!r}")

    def run(self) -> None:
        n = len(self.masters.servers)
        next_at = time.monotonic() + self.rng.uniform(*self.every)
        while not self.stopping.is_set():
            now = time.monotonic()
            for item in list(self.active):
                fault, idx, heal_at = item
                if now >= heal_at:
                    self._heal(fault, idx)
                    self.active.remove(item)
            if now >= next_at:
                busy = {i for _f, idx, _t in self.active for i in idx}
                free = self.max_faulted - len(busy)
                if free > 0:
                    k = self.rng.randint(1, free)
                    idx = sorted(self.rng.sample([i for i in range(n) if i not in busy], k))
                    fault, duration = self.make_fault(self.rng)
                    self.masters.log(f"nemesis: {fault} on {idx} for {duration:.3f}s")
                    try:
                        fault.apply(self.masters, idx)
                        self.applied += 1
                        self.active.append((fault, idx, now + duration))
                        self.max_seen = max(self.max_seen, len(busy) + len(idx))
                    except Exception as exc:
                        self.errors.append(f"apply {fault} {idx}: {exc!r}")
                        self.masters.log(f"nemesis: apply failed: {exc!r}")
                        self._heal(fault, idx)
                next_at = now + self.rng.uniform(*self.every)
            self.stopping.wait(0.01)
        for fault, idx, _t in self.active:
            self._heal(fault, idx)
        self.active.clear()

    def stop(self) -> None:
        self.stopping.set()
        self.join(60)
