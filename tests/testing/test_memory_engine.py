"""The memory engine keeps the engine contract (the Protocols of _engines/contract.py), and its
rounds, which have no fds, are driven by their deadline alone: by its own blocking run() and by
the asyncio driver (aio/_driver.py), ending when a late reply decides, or at the round's timeout
when a master never answers."""

from __future__ import annotations

import asyncio
import os
import sys
import time

import pytest

from hiredlock._core import requests as _requests
from hiredlock._core.masters import parse_masters
from hiredlock._core.scripts import RELEASE, Outcome
from hiredlock._engines import contract
from hiredlock.aio._driver import drive
from hiredlock.testing import MemoryEngine, memory_masters
from hiredlock.testing._engine import MemoryRound

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "engine")
)
from test_contract import _assert_satisfies

OK, TIMEOUT, SKIPPED = int(Outcome.OK), int(Outcome.TIMEOUT), int(Outcome.SKIPPED)
TOKEN = b"t" * 40


def test_memory_engine_satisfies_the_contract():
    _assert_satisfies(MemoryEngine, contract.Engine, ("name",))
    _assert_satisfies(MemoryRound, contract.Round, ("before_close",))
    masters = memory_masters(3)
    engine = MemoryEngine(masters=parse_masters(masters), quorum=None)
    assert engine.name == "memory"
    rnd = engine.begin(_requests.SetNx((b"k",), (TOKEN,), 1000, 200.0))
    assert rnd.before_close is None and rnd.fds_wanted() == {} and rnd.finished()
    codes, elapsed_ns, details, values = engine.finish(rnd)[0]
    assert codes == bytes([OK] * 3) and elapsed_ns >= 0 and details is None and values is None
    release = _requests.script(RELEASE, 1, ((b"k", TOKEN),), 200, True)
    assert engine.run(release)[0][0] == bytes([OK] * 3)
    assert not engine.owes_replies()


def _set(timeout_ms: float) -> _requests.SetNx:
    return _requests.SetNx((b"k",), (TOKEN,), 10_000, timeout_ms)


def _run_sync(engine, request):
    return engine.run(request)[0]


def _run_async(engine, request):
    async def main():
        rnd = engine.begin(request)
        await drive(rnd)
        return engine.finish(rnd)[0]

    return asyncio.run(main())


DRIVERS = {"blocking": _run_sync, "asyncio": _run_async}


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_late_quorum_ends_the_round_when_its_replies_arrive(driver):
    masters = memory_masters(5)
    for i in range(3):
        masters.delay(i, 0.1)
    masters.stop(4)
    engine = MemoryEngine(parse_masters(masters))
    start = time.monotonic()
    codes, elapsed_ns, _, _ = DRIVERS[driver](engine, _set(5_000))
    took = time.monotonic() - start
    assert codes[:3].count(OK) + codes[3:4].count(OK) >= 3, codes
    assert codes[4] == SKIPPED  # (stopped: not waited for once the key was decided)
    assert 0.1 <= took < 4.0, took  # woken for the late replies, not at the 5 s timeout
    assert elapsed_ns >= 100_000_000


@pytest.mark.parametrize("driver", DRIVERS)
def test_a_round_waits_for_a_stopped_master_until_its_timeout(driver):
    masters = memory_masters(3)
    masters.stop(0)
    masters.stop(1)
    engine = MemoryEngine(parse_masters(masters))
    start = time.monotonic()
    codes, _, _, _ = DRIVERS[driver](engine, _set(100.0))
    assert time.monotonic() - start >= 0.1
    assert codes == bytes([TIMEOUT, TIMEOUT, OK])
    masters.resume(0)  # its SET ran when it resumed
    assert masters.keys(0) == [b"k"]


def test_a_round_on_an_injected_clock_sleeps_on_it():
    now = [0]

    def sleep(seconds: float) -> None:
        now[0] += int(seconds * 1e9)

    masters = memory_masters(3, clock=lambda: now[0], sleep=sleep)
    masters.delay(0, 30.0)
    masters.delay(1, 60.0)
    engine = MemoryEngine(parse_masters(masters))
    codes, elapsed_ns, _, _ = engine.run(_set(120_000.0))[0]
    assert codes == bytes([OK, SKIPPED, OK]), codes  # (master 2 answers at once)
    assert elapsed_ns == 30_000_000_000  # decided by master 0's reply, 30 virtual seconds in
    assert now[0] == 30_000_000_000
