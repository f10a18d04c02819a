"""An interrupted round never desynchronises a connection.

Rounds are interrupted at random points (a signal handler raising KeyboardInterrupt, as SIGINT's
does, or an exception of its own, once or a few times in a row) while DEBUG SLEEP makes the
masters slow, so that replies are still owed when the exception escapes. After each interruption
the same Redlock tries a name that another client holds on every master: a late +OK owed to the
interrupted round must never be taken for the answer, so that name is never acquired.
"""

from __future__ import annotations

import contextlib
import random
import signal
import time
import uuid

import pytest
from support import FOREIGN, assert_foreign_intact, debug_sleep, set_foreign, urls
from thinning import campaign

from hiredlock import HiredlockError, LockNotAcquired

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "setitimer"), reason="signal.setitimer is POSIX only"
)

# (a third of the rounds are interrupted: about 28 in a default run, 50 in a full one; see
# thinning.campaign)
ITERATIONS = campaign(full=150, default=80)
TIME_BOUND_S = 25.0  # per engine; the loop stops early rather than run long on a slow machine
SLEEP_S = 0.2  # DEBUG SLEEP of the masters
MASTER_TIMEOUT = 0.1  # shorter than the sleep: some rounds time out, some are interrupted
TTL = 10.0
HELD_PX = 600_000  # the other client's lock outlives the test


class Interrupted(Exception):
    """What the test's signal handler raises, besides KeyboardInterrupt."""


@contextlib.contextmanager
def interrupting_handler():
    """SIGALRM raises armed[0] (an exception class) while armed[1] > 0 (a count of raises left),
    like Ctrl-C pressed once or a few times."""
    armed: list = [None, 0]

    def handler(signum, frame):
        if armed[0] is not None and armed[1] > 0:
            armed[1] -= 1
            raise armed[0]()

    old = signal.signal(signal.SIGALRM, handler)
    try:
        yield armed
    finally:
        armed[0] = None
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def some_round(rl, rng):
    """An acquire, or a release or an extend of a lock acquired just before (masters awake)."""
    lock = rl.lock(f"interrupted:{uuid.uuid4().hex[:8]}", TTL)
    kind = rng.choice(("acquire", "acquire", "acquire", "release", "extend"))
    if kind != "acquire":
        with contextlib.suppress(HiredlockError):
            lock.acquire(blocking=False)
    return kind, lock


def run_interrupted(armed, rng, action):
    """Runs action() with a timer that raises once or a few times (the later ones land in what
    the first one set off: the unlock that an interrupted acquire or release still sends);
    True if the timer's exception interrupted it."""
    armed[0] = rng.choice((KeyboardInterrupt, Interrupted))
    armed[1] = rng.choice((1, 2, 2, 3))
    first = rng.uniform(0.0005, SLEEP_S + MASTER_TIMEOUT)
    signal.setitimer(signal.ITIMER_REAL, first, rng.uniform(0.001, MASTER_TIMEOUT))
    try:
        try:
            action()
        except HiredlockError:
            pass
        finally:
            armed[0] = None
            signal.setitimer(signal.ITIMER_REAL, 0)
    except (KeyboardInterrupt, Interrupted):  # wherever it landed, up to the disarming
        return True
    return False


def test_interrupted_rounds_never_desynchronise(engine, make_redlock, masters5):
    masters = masters5[:3]
    held = "held-by-another-client"
    set_foreign(masters, held, px=HELD_PX)
    rl = make_redlock(urls(masters), master_timeout=MASTER_TIMEOUT, retry_count=1)
    rng = random.Random()
    interrupted = 0
    wrongly_acquired = []
    deadline = time.monotonic() + TIME_BOUND_S
    with interrupting_handler() as armed:
        for iteration in range(ITERATIONS):
            if time.monotonic() > deadline:
                break
            kind, lock = some_round(rl, rng)
            sleepers = []
            if rng.random() < 0.8:
                sleepers = debug_sleep(masters, SLEEP_S)
            try:
                if kind == "acquire":
                    action = lambda lock=lock: lock.acquire(blocking=False)  # noqa: E731
                elif kind == "release":
                    action = lock.release
                else:
                    action = lock.extend
                interrupted += run_interrupted(armed, rng, action)
                # The same Redlock, its connections and whatever they still owe, right away.
                try:
                    if rl.lock(held, TTL).acquire(blocking=False):
                        wrongly_acquired.append((iteration, kind))
                except LockNotAcquired:
                    pass
            finally:
                for sock in sleepers:
                    sock.close()
    assert not wrongly_acquired, f"a name held by another client was acquired: {wrongly_acquired}"
    assert interrupted >= 10, f"only {interrupted} rounds were interrupted"
    assert_foreign_intact(masters, held, px=HELD_PX, value=FOREIGN, tolerance_ms=HELD_PX // 2)
