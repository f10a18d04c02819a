"""The two engines follow the same stop rules (the decision table in
hiredlock/_engines/contract.py).

Each test scripts its masters' timelines (tests/fake_master.TimedMasters, in a process of their
own: answer at once, late, never, or take a command's first bytes only; servers.BlackHole: a
connect that never completes) and drives an engine's rounds directly, on each engine and with
each round driver (the blocking one of the sync API, the asyncio one of the async API): the votes
are the table's, the same for every engine and driver.

Times: TIMEOUT_MS is the rounds' master timeout (D); a connection opened in a round has the
connect allowance, CONNECT_TIMEOUT_MIN_MS (100 ms), from the round's start (C). A reply can come
later than planned, never sooner: LATE replies (LATE_S after their command) come past D and leave
room before C; VERY_LATE ones come so long after D that a round ending at D cannot see them.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from fake_master import TimedMasters
from servers import BlackHole

from hiredlock import Outcome
from hiredlock._core.masters import parse_masters
from hiredlock._core.requests import RunScript, SetNx
from hiredlock._core.scripts import CONNECT_TIMEOUT_MIN_MS, PING
from hiredlock._engines.selection import engine_class
from hiredlock.aio._driver import drive

TIMEOUT_MS = 30.0
LATE_S = 0.045
VERY_LATE_S = 0.085
TTL_MS = 10_000

# the votes as names: a failed comparison shows every one
OK, TAKEN, TIMEOUT, CONN_ERROR, SKIPPED = "OK", "TAKEN", "TIMEOUT", "CONN_ERROR", "SKIPPED"

DRIVERS = ["blocking", "asyncio"]


@pytest.fixture(params=DRIVERS, ids=DRIVERS)
def driver(request) -> str:
    return request.param


@pytest.fixture
def make_masters():
    made = []

    def make(*plans: dict) -> TimedMasters:
        made.append(TimedMasters(list(plans)))
        return made[-1]

    yield make
    for masters in made:
        masters.close()


@pytest.fixture
def black_hole():
    hole = BlackHole()
    yield hole
    hole.close()


class Rounds:
    """One engine on the given masters, its rounds run by the test's driver."""

    def __init__(self, engine: str, driver: str, urls: list[str]) -> None:
        self.engine = engine_class(engine)(parse_masters(urls))
        self.driver = driver
        self.n = 0

    def _run(self, request):
        if self.driver == "blocking":
            return self.engine.run(request)

        async def driven():
            rnd = self.engine.begin(request)
            await drive(rnd)
            return self.engine.finish(rnd)

        return asyncio.run(driven())

    def set_nx(self, timeout_ms: float = TIMEOUT_MS) -> list[str]:
        """An acquire's round: SET NX PX of a new key on every master; the votes."""
        self.n += 1
        result = self._run(SetNx([b"agree:%d" % self.n], [b"token"], TTL_MS, timeout_ms))
        self.last = result[0]
        return [Outcome(code).name for code in result[0][0]]

    def script(
        self,
        argv: tuple[bytes, ...] = (b"1",),
        timeout_ms: float = TIMEOUT_MS,
        honour_backoff: bool = False,
    ) -> list[str]:
        """A round that waits for all (as a release, or connect()): a script on every master."""
        request = RunScript(
            PING.sha, PING.source, 0, [argv], timeout_ms, True, False, honour_backoff
        )
        result = self._run(request)
        self.last = result[0]
        return [Outcome(code).name for code in result[0][0]]

    def detail(self, master: int) -> str:
        return (self.last[2] or {}).get(master, "")

    def close(self) -> None:
        self.engine.close()


@pytest.fixture
def rounds(engine, driver):
    made = []

    def make(urls: list[str]) -> Rounds:
        made.append(Rounds(engine, driver, urls))
        return made[-1]

    yield make
    for each in made:
        each.close()


def warm_up(rnd: Rounds, n: int) -> None:
    """Opens every master's connection (each answers at once)."""
    assert rnd.script() == [OK] * n


PROMPT: dict = {}
LATE = {"delay": LATE_S}
VERY_LATE = {"delay": VERY_LATE_S}
SILENT = {"delay": None}


# -- past the deadline: masters whose connection opened in the round -----------------------------


def test_undecided_round_waits_for_new_connections_until_a_quorum(make_masters, rounds):
    """Deadline passed with the key undecided: the round goes on for the masters connected in
    it (the connect allowance) and ends once the key is decided."""
    masters = make_masters(PROMPT, PROMPT, LATE, SILENT, SILENT)
    assert rounds(masters.urls).set_nx() == [OK, OK, OK, SKIPPED, SKIPPED]


def test_no_wait_for_new_connections_that_cannot_make_a_quorum(make_masters, rounds):
    """Deadline passed, the key undecided, and even every new connection's OK would not make a
    quorum: the round ends at its deadline (the key fails either way)."""
    masters = make_masters(*[PROMPT] * 5)
    rnd = rounds(masters.urls)
    warm_up(rnd, 5)
    masters.set(0, taken=True)
    for i in (1, 2):
        masters.set(i, **SILENT)
    for i in (3, 4):
        masters.set(i, **VERY_LATE)
        masters.hang_up(i)
    assert rnd.set_nx() == [TAKEN, TIMEOUT, TIMEOUT, TIMEOUT, TIMEOUT]


def test_decided_wait_all_round_waits_for_new_connections_until_they_answer(make_masters, rounds):
    """A round that waits for all (connect(), a release) gives a master whose connection opened
    in it the connect allowance, even once decided; the unlock after a failed attempt (best
    effort) does not wait past its deadline."""
    masters = make_masters(PROMPT, PROMPT, PROMPT, PROMPT, LATE)
    assert rounds(masters.urls).script() == [OK] * 5
    masters = make_masters(PROMPT, PROMPT, PROMPT, PROMPT, VERY_LATE)
    assert rounds(masters.urls).script(honour_backoff=True) == [OK, OK, OK, OK, SKIPPED]


# -- late replies of the other masters meanwhile ------------------------------------------------


def test_late_replies_count_while_new_connections_are_waited_for(make_masters, rounds):
    """While the round waits past its deadline for a new connection, a late reply from a master
    connected before the round counts: here it makes the quorum."""
    masters = make_masters(*[PROMPT] * 5)
    rnd = rounds(masters.urls)
    warm_up(rnd, 5)
    masters.set(1, **LATE)  # connected before the round, answers past its deadline
    masters.set(2, **SILENT)
    masters.set(3, **LATE)
    masters.set(4, **SILENT)
    masters.hang_up(3)
    masters.hang_up(4)
    assert rnd.set_nx() == [OK, OK, SKIPPED, OK, SKIPPED]


# -- a connect still pending when a round ends --------------------------------------------------


def test_a_pending_connect_is_kept_for_later_rounds(make_masters, black_hole, rounds):
    """A connect still pending when its round ends is kept: the next round does not open
    another one (so does not wait for it once decided, as it would for a new connection), and
    once the connect allowance of the round that opened it has passed, it has timed out."""
    masters = make_masters(*[PROMPT] * 4)
    rnd = rounds([*masters.urls, black_hole.url])
    started = time.monotonic()
    votes = rnd.set_nx()
    assert votes[:4].count(OK) >= 3 and votes[4] == SKIPPED, votes
    assert rnd.script() == [OK, OK, OK, OK, SKIPPED]
    # (a library deadline to pass, not a synchronisation)
    time.sleep(max(0.0, started + 1.5 * CONNECT_TIMEOUT_MIN_MS / 1000 - time.monotonic()))
    assert rnd.set_nx()[4] == CONN_ERROR
    assert rnd.detail(4) == "connect timed out"


# -- a master that only has bytes left to write --------------------------------------------------


def test_a_master_that_only_flushes_is_not_waited_for(make_masters, rounds):
    """A master that has answered every command of the round but not read all of it (its socket
    takes no more bytes) owes the round nothing: a round that waits for all ends without it."""
    masters = make_masters(PROMPT, PROMPT, {"flush_only": True})
    rnd = rounds(masters.urls)
    timeout_ms = 5000.0
    big = b"x" * (16 << 20)  # more than the socket buffers of a loopback connection take
    started = time.monotonic()
    assert rnd.script(argv=(big,), timeout_ms=timeout_ms) == [OK, OK, OK]
    took = time.monotonic() - started
    assert took < timeout_ms / 1000 / 2, f"the round waited {took:.2f} s for the flush-only master"
