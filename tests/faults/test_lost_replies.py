"""Fault injection, tier 1: lost replies.  The proxy lets requests reach the masters
and throws their replies away (drop_replies).

* On 2 of 5: acquire/release cycles; 100 ms after each release no master (faulted ones included:
  the release must be sent to masters that never answered) has the key.
* On 3 of 5: no attempt succeeds, and after each failed attempt no master has a key of it (the
  unlock after a failed attempt reaches every master whose SET may have landed).

Each runs twice: with the release script already cached on the masters, and with the script cache
flushed (as after a restart).  The flushed variant pins the fix of bug B2: an EVALSHA whose NOSCRIPT
reply is lost is never followed by its EVAL, so the engines send EVAL on a connection that has not
run the script yet.

Counts: 200 cycles and 50 attempts (the spec's), for both variants."""

from __future__ import annotations

import threading
import time
from collections import deque

import pytest

from faults.masters import Fault
from faults.scenario import Scenario
from hiredlock import QuorumUnreachable
from hiredlock._core.scripts import RELEASE

pytest_plugins = ["faults.plugin"]

CYCLES = 200
ATTEMPTS = 50
CHECK_AFTER = 0.1
SCRIPTS = ["cached", "flushed"]


def prepare_scripts(lab, scripts):
    """lab already flushed every script cache; "cached" loads the release script everywhere."""
    if scripts == "cached":
        for srv in lab.masters.servers:
            srv.admin().script_load(RELEASE.source)


class DelayedChecker(threading.Thread):
    """Checks, CHECK_AFTER seconds after each release, that no master has the key."""

    def __init__(self, servers):
        super().__init__(daemon=True)
        self.servers = servers
        self.queue = deque()
        self.failures = []
        self.checked = 0
        self.done = threading.Event()

    def add(self, key: bytes) -> None:
        self.queue.append((time.monotonic() + CHECK_AFTER, key))

    def run(self) -> None:
        while not (self.done.is_set() and not self.queue):
            if not self.queue:
                time.sleep(0.005)
                continue
            due, key = self.queue[0]
            now = time.monotonic()
            if now < due:
                time.sleep(due - now)
            self.queue.popleft()
            vals = [s.admin().get(key) for s in self.servers]
            self.checked += 1
            if any(v is not None for v in vals):
                self.failures.append(f"{key!r} {CHECK_AFTER * 1e3:.0f} ms after release: {vals}")


@pytest.mark.parametrize("scripts", SCRIPTS)
def test_drop_replies_on_two(engine, lab, scripts):
    prepare_scripts(lab, scripts)
    scn = Scenario(
        f"lost replies drop_replies on 2/5 scripts {scripts}",
        engine,
        lab,
        fault=Fault("drop_replies"),
        faulted=[0, 1],
    )
    checker = DelayedChecker(lab.masters.servers)
    checker.start()
    try:
        with scn:
            rl = scn.redlock()
            for i in range(CYCLES):
                lock = rl.lock(f"{scn.name}:{i}", scn.ttl)
                t0 = time.monotonic()
                ok = lock.acquire(blocking=False)
                scn.unc["calls"] += 1
                scn.unc["lat"].append(time.monotonic() - t0)
                if not ok:
                    continue
                scn.unc["ok"] += 1
                lock.release()
                checker.add(lock.key)
    finally:
        checker.done.set()
        checker.join(30)
    scn.expect(checker.checked == scn.unc["ok"], f"checked {checker.checked} of {scn.unc['ok']}")
    scn.expect(not checker.failures, f"keys left after release: {checker.failures[:5]}")
    scn.check_tier1_minority()


@pytest.mark.parametrize("scripts", SCRIPTS)
def test_drop_replies_on_three(engine, lab, scripts):
    prepare_scripts(lab, scripts)
    scn = Scenario(
        f"lost replies drop_replies on 3/5 scripts {scripts}",
        engine,
        lab,
        fault=Fault("drop_replies"),
        faulted=[0, 1, 2],
    )
    problems = []
    with scn:
        rl = scn.redlock(retry_count=1)
        for i in range(ATTEMPTS):
            lock = rl.lock(f"{scn.name}:{i}", scn.ttl)
            t0 = time.monotonic()
            try:
                got = lock.acquire(blocking=False)
                problems.append(f"attempt {i}: acquire returned {got}")
                if got:
                    scn.unc["ok"] += 1
                    lock.release()
            except QuorumUnreachable:
                pass
            scn.unc["calls"] += 1
            scn.unc["lat"].append(time.monotonic() - t0)
            # The unlock has been sent to all five; the faulted masters run it (only their replies
            # are lost): poll briefly, as their commands may still be in flight.
            deadline = time.monotonic() + 0.2
            while True:
                vals = [s.admin().get(lock.key) for s in lab.masters.servers]
                if all(v is None for v in vals):
                    break
                if time.monotonic() > deadline:
                    problems.append(f"attempt {i}: key left after the failed attempt: {vals}")
                    break
                time.sleep(0.002)
    scn.expect(scn.unc["ok"] == 0, f"{scn.unc['ok']} attempts acquired without a quorum")
    scn.expect(not problems, f"{problems[:5]}")
    scn.check_safety()
