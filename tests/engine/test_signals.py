"""Signals in the middle of a round (engine contract: the stop and interrupt rules).

* A signal handler's exception ends a round that waits on a stopped master within a fraction of
  its master_timeout (the engine checks for signals while it waits), and the Redlock that was
  interrupted keeps working: the reply the interrupted round was owed is never taken for the
  answer to a later command.
* Rounds interrupted at random points, against masters that a DEBUG SLEEP slows down now and
  then, never desynchronise a connection: a name another client holds on every master is never
  acquired afterwards.
"""

from __future__ import annotations

import contextlib
import random
import signal
import threading
import time
import uuid

import pytest
from support import EXTRA_SLACK, FOREIGN, assert_no_key, assert_values, kb, values
from thinning import campaign

from hiredlock import HiredlockError, Outcome, QuorumUnreachable
from hiredlock._core.masters import parse_masters
from hiredlock._core.requests import RunScript, SetNx
from hiredlock._core.scripts import EXTEND, RELEASE
from hiredlock._engines.selection import engine_class

pytestmark = pytest.mark.skipif(
    not hasattr(signal, "setitimer"), reason="signal.setitimer is POSIX only"
)

LONG_TIMEOUT = 2.0  # master_timeout of the interrupted rounds
TTL = 10.0
TIMER_DELAY = 0.05
INTERRUPT_BOUND = 1.0 + EXTRA_SLACK  # well under LONG_TIMEOUT


class Interrupted(Exception):
    """What the test's SIGALRM handler raises."""


@contextlib.contextmanager
def sigalrm_raising(repeat: bool = False):
    """Installs a SIGALRM handler that raises Interrupted while `armed[0]` is True (once per arm,
    unless `repeat`), and restores everything on exit."""
    armed = [False]

    def handler(signum, frame):
        if armed[0]:
            armed[0] = repeat
            raise Interrupted()

    old = signal.signal(signal.SIGALRM, handler)
    try:
        yield armed
    finally:
        armed[0] = False
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def arm(armed, delay: float, interval: float = 0.0) -> None:
    armed[0] = True
    signal.setitimer(signal.ITIMER_REAL, delay, interval)


def disarm(armed) -> None:
    armed[0] = False
    signal.setitimer(signal.ITIMER_REAL, 0)


def check_in_sync(rl, srv, tag: str) -> None:
    """The Redlock's connection is in step with its commands: a name another client holds is
    refused (a stale +OK or :1 taken for its answer would hand it out), and a full cycle on a
    fresh name leaves exactly what it should on the master."""
    foreign = f"hl:signals:foreign:{tag}"
    srv.admin().set(foreign, FOREIGN)
    for _ in range(3):
        assert not rl.lock(foreign, TTL).acquire(blocking=False)
    assert srv.admin().get(foreign) == FOREIGN
    name = f"hl:signals:fresh:{tag}"
    lock = rl.lock(name, TTL)
    assert lock.acquire(blocking=False)
    assert values([srv], name) == [lock.token.encode()]
    lock.extend()
    assert 0 < srv.admin().pttl(name) <= TTL * 1000
    lock.release()
    assert_no_key([srv], name)


@pytest.mark.parametrize("op", ["acquire", "extend", "release"])
def test_signal_ends_a_round_waiting_on_a_stopped_master(engine, masters5, make_redlock, key, op):
    srv = masters5[0]
    rl = make_redlock([srv.url], master_timeout=LONG_TIMEOUT)
    lock = rl.lock(key, TTL)
    if op != "acquire":
        assert lock.acquire(blocking=False)
    check_in_sync(rl, srv, f"{op}-before")
    srv.stop()
    elapsed = None
    try:
        with sigalrm_raising(repeat=True) as armed:
            t0 = time.monotonic()
            # Every 50 ms, as a user pressing Ctrl-C again: an interrupted acquire or release
            # sends the unlock before the exception propagates, and that round waits on the
            # stopped master too.
            arm(armed, TIMER_DELAY, TIMER_DELAY)
            with pytest.raises(Interrupted):
                if op == "acquire":
                    lock.acquire(blocking=False)
                elif op == "extend":
                    lock.extend()
                else:
                    lock.release()
            elapsed = time.monotonic() - t0
    finally:
        srv.cont()  # the interrupted commands run now; their replies are owed to the Redlock
    assert elapsed < INTERRUPT_BOUND, f"{op} raised after {elapsed:.3f} s"
    check_in_sync(rl, srv, f"{op}-after")
    if op != "extend":
        assert_no_key([srv], key)  # the interrupted release (or unlock) still reached it
    else:
        lock.release()  # the extend was interrupted, not failed: the lock is still ours
        assert_no_key([srv], key)


@pytest.mark.parametrize("op", ["set_nx", "release"])
def test_engine_round_ends_on_a_signal(engine, masters5, key, op):
    """The engine alone: a round waiting on a stopped master ends at the signal, and the reply
    it was owed is read and dropped by a later round, never taken for that round's answer."""
    srv = masters5[0]
    eng = engine_class(engine)(parse_masters([srv.url]), 1)
    token = b"t" * 40
    try:
        srv.stop()
        try:
            with sigalrm_raising() as armed:
                t0 = time.monotonic()
                arm(armed, TIMER_DELAY)
                with pytest.raises(Interrupted):
                    if op == "set_nx":
                        eng.run(SetNx([kb(key)], [token], 10_000, LONG_TIMEOUT * 1000))
                    else:
                        eng.run(
                            RunScript(
                                RELEASE.sha,
                                RELEASE.source,
                                1,
                                [(kb(key), token)],
                                LONG_TIMEOUT * 1000,
                                True,
                            )
                        )
                elapsed = time.monotonic() - t0
        finally:
            srv.cont()
        assert elapsed < INTERRUPT_BOUND, f"{op} raised after {elapsed:.3f} s"
        # A foreign value: a stale +OK (or :1) taken for these answers would say OK.
        held = kb(key) + b":held"
        srv.admin().set(held, FOREIGN)
        (result,) = eng.run(SetNx([held], [token], 10_000, LONG_TIMEOUT * 1000))
        assert result[0] == bytes([Outcome.TAKEN]), result
        (result,) = eng.run(
            RunScript(RELEASE.sha, RELEASE.source, 1, [(held, token)], LONG_TIMEOUT * 1000, True)
        )
        assert result[0] == bytes([Outcome.TAKEN]), result
        assert srv.admin().get(held) == FOREIGN
    finally:
        eng.close()


def test_signal_handler_that_returns_lets_the_round_finish(engine, masters5, make_redlock, key):
    """A handler that does not raise: the round goes on and decides as usual."""
    srv = masters5[0]
    rl = make_redlock([srv.url], master_timeout=LONG_TIMEOUT)
    calls = []
    old = signal.signal(signal.SIGALRM, lambda signum, frame: calls.append(signum))
    try:
        lock = rl.lock(key, TTL)
        srv.stop()
        resumer = threading.Timer(0.3, srv.cont)  # the master answers 0.3 s into the round
        try:
            signal.setitimer(signal.ITIMER_REAL, TIMER_DELAY, TIMER_DELAY)
            resumer.start()
            assert lock.acquire(blocking=False)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            resumer.join()
    finally:
        signal.signal(signal.SIGALRM, old)
    assert calls
    lock.release()
    check_in_sync(rl, srv, "returning-handler")


class Sleeper(threading.Thread):
    """Sends DEBUG SLEEP to one master when asked (skipped while the last one runs)."""

    def __init__(self, srv) -> None:
        super().__init__(daemon=True)
        self.client = srv.client(socket_timeout=10)
        self.asked = threading.Event()
        self.seconds = 0.0
        self.stopping = False
        self.errors: list[str] = []

    def sleep(self, seconds: float) -> None:
        if not self.asked.is_set():
            self.seconds = seconds
            self.asked.set()

    def run(self) -> None:
        while not self.stopping:
            self.asked.wait()
            if self.stopping:
                return
            try:
                self.client.execute_command("DEBUG", "SLEEP", f"{self.seconds:.3f}")
            except Exception as exc:  # reported by the test
                self.errors.append(repr(exc))
                return
            finally:
                self.asked.clear()

    def stop(self) -> None:
        self.stopping = True
        self.asked.set()
        self.join(10)
        self.client.close()  # other tests count the connections the masters have


ITERATIONS = campaign(full=120, default=50)  # (see thinning.campaign)
TIME_BUDGET = 60.0 + EXTRA_SLACK


def test_random_interrupts_never_desynchronise(engine, masters5, make_redlock):
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    servers = masters5[:3]
    rl = make_redlock([s.url for s in servers], master_timeout=0.3, retry_delay=0.01)
    foreign = f"hl:signals:held-by-another:{uuid.uuid4().hex[:8]}"
    for srv in servers:
        srv.admin().set(foreign, FOREIGN)
    sleepers = [Sleeper(srv) for srv in servers]
    for s in sleepers:
        s.start()
    interrupted = iterations = 0
    deadline = time.monotonic() + TIME_BUDGET
    try:
        with sigalrm_raising() as armed:
            while iterations < ITERATIONS and time.monotonic() < deadline:
                iterations += 1
                lock = rl.lock(f"hl:signals:random:{seed}:{iterations}", 5.0)
                for sleeper in rng.sample(sleepers, rng.choice((0, 1, 1, 2))):
                    sleeper.sleep(rng.uniform(0.02, 0.12))
                try:
                    arm(armed, rng.uniform(0.0002, 0.03))
                    if lock.acquire(blocking=False):
                        lock.extend()
                        lock.release()
                    disarm(armed)
                except Interrupted:
                    interrupted += 1
                except HiredlockError:
                    pass  # a slept-on master can fail a round: not what is tested here
                finally:
                    disarm(armed)
                try:
                    got = rl.lock(foreign, 5.0).acquire(blocking=False)
                except QuorumUnreachable:
                    got = False
                assert not got, (
                    f"seed {seed}: after iteration {iterations} ({interrupted} interrupted), "
                    "a name held by another client on every master was acquired"
                )
    finally:
        for s in sleepers:
            s.stop()
    assert not [e for s in sleepers for e in s.errors]
    assert values(servers, foreign) == [FOREIGN] * len(servers)
    assert iterations >= 50, f"only {iterations} iterations in {TIME_BUDGET} s"
    assert interrupted >= 10, f"seed {seed}: only {interrupted} of {iterations} interrupted"
    # the Redlock still works once the masters are left alone
    name = f"hl:signals:random:{seed}:final"
    lock = rl.lock(name, 5.0)
    assert lock.acquire(blocking=False)
    # (eventually: the round may have ended on a quorum before the last master answered)
    assert_values(servers, name, lock.token)
    lock.release()
    assert_no_key(servers, kb(name))


def test_random_interrupts_never_desynchronise_an_engine(engine, masters5):
    """The same at the engine level, where a desynchronised master shows directly: after every
    interrupted round, no master may answer OK to a SET NX or a release of a name another client
    holds (a stale +OK or :1 read as the answer would)."""
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    servers = masters5[:3]
    eng = engine_class(engine)(parse_masters([s.url for s in servers]), 2)
    foreign = f"hl:signals:held-by-another:{uuid.uuid4().hex[:8]}".encode()
    for srv in servers:
        srv.admin().set(foreign, FOREIGN)
    token = b"f" * 40
    sleepers = [Sleeper(srv) for srv in servers]
    for s in sleepers:
        s.start()
    interrupted = iterations = 0
    deadline = time.monotonic() + TIME_BUDGET
    try:
        with sigalrm_raising() as armed:
            while iterations < ITERATIONS and time.monotonic() < deadline:
                iterations += 1
                name = f"hl:signals:engine:{seed}:{iterations}".encode()
                for sleeper in rng.sample(sleepers, rng.choice((1, 2, 3))):
                    sleeper.sleep(rng.uniform(0.02, 0.12))
                try:
                    arm(armed, rng.uniform(0.0002, 0.03))
                    eng.run(SetNx([name], [token], 5000, 300))
                    eng.run(
                        RunScript(EXTEND.sha, EXTEND.source, 1, [(name, token, b"5000")], 300, True)
                    )
                    eng.run(RunScript(RELEASE.sha, RELEASE.source, 1, [(name, token)], 300, True))
                    disarm(armed)
                except Interrupted:
                    interrupted += 1
                finally:
                    disarm(armed)
                (taken,) = eng.run(SetNx([foreign], [token], 5000, 300))
                (released,) = eng.run(
                    RunScript(RELEASE.sha, RELEASE.source, 1, [(foreign, token)], 300, True)
                )
                for what, result in (("SET NX", taken), ("release", released)):
                    assert Outcome.OK not in result[0], (
                        f"seed {seed}, iteration {iterations} ({interrupted} interrupted): "
                        f"{what} of a name held by another client: {list(result[0])} "
                        f"{result[2]}"
                    )
    finally:
        for s in sleepers:
            s.stop()
        eng.close()
    assert not [e for s in sleepers for e in s.errors]
    assert values(servers, foreign) == [FOREIGN] * len(servers)
    assert iterations >= 50, f"only {iterations} iterations in {TIME_BUDGET} s"
    assert interrupted >= 10, f"seed {seed}: only {interrupted} of {iterations} interrupted"
