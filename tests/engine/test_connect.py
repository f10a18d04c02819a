"""Connecting to masters inside a round: the connect allowance (CONNECT_TIMEOUT_MIN_MS from the
round's start), not only the master timeout.

* A master whose first answer takes longer than the master timeout but less than the allowance is
  connected, and votes OK, on both engines and both APIs.
* Cold connections do not cost votes: twenty threads, each with a fresh Redlock on five healthy
  masters, lock and unlock at once with a 10 ms master_timeout: every first round opens five
  connections and logs in while the other threads hold the GIL, within the allowance for the
  connect, the login and the replies, so these rounds do not fail for want of answers. The
  releases and the later cycles run on warm connections with the plain 10 ms deadline: under
  twenty threads taking turns on the GIL one of them may time out (a key left then expires after
  its 0.2 s ttl); any other failure still fails the test.
"""

from __future__ import annotations

import threading

import pytest
from apis import make_redlock_fixture, pytest_generate_tests  # noqa: F401  (both APIs)
from faults.proxy import FaultProxy
from support import urls

from hiredlock import HiredlockError, LockLost, Outcome, QuorumUnreachable, Redlock
from hiredlock._core.scripts import CONNECT_TIMEOUT_MIN_MS, MASTER_TIMEOUT_MAX_MS

# The slow master's replies come this late: past the default master timeout (at most
# MASTER_TIMEOUT_MAX_MS), well inside the connect allowance.
SLOW_MS = 70.0


@pytest.fixture
def slow_last_master(masters5):
    """Five masters; the last one is reached through a proxy that delays its replies by SLOW_MS."""
    proxy = FaultProxy([("127.0.0.1", masters5[4].port)])
    try:
        proxy.set_mode(0, "latency", ms=SLOW_MS, direction="down")
        yield [s.url for s in masters5[:4]] + [proxy.url(0)]
    finally:
        proxy.close()


def test_connect_waits_for_a_slow_master_up_to_the_connect_allowance(
    make_redlock, slow_last_master
):
    assert MASTER_TIMEOUT_MAX_MS < SLOW_MS < CONNECT_TIMEOUT_MIN_MS
    rl = make_redlock(slow_last_master)  # default master_timeout: MASTER_TIMEOUT_MAX_MS at most
    votes = rl.connect()
    assert [vote.outcome for vote in votes] == [Outcome.OK] * 5, votes


# -- cold connections ------------------------------------------------------------------------------


THREADS = 20
CYCLES = 3  # per thread: the first on cold connections, the others on warm ones
TTL = 0.2
MASTER_TIMEOUT = 0.01


def release(lock) -> None:
    try:
        lock.release()
    except LockLost as exc:
        if any(vote.outcome not in (Outcome.OK, Outcome.TIMEOUT) for vote in exc.votes):
            raise


def all_timed_out(votes) -> bool:
    """A round on warm connections that found no answer within the plain 10 ms deadline (as a
    release may, under twenty threads taking turns on the GIL): not what this test is about."""
    return all(vote.outcome in (Outcome.OK, Outcome.TIMEOUT) for vote in votes)


def test_cold_connections_cost_no_votes(engine, masters5):
    start = threading.Barrier(THREADS)
    unreachable: list[str] = []
    other_failures: list[str] = []

    def work(index: int) -> None:
        rl = Redlock(urls(masters5), backend=engine, master_timeout=MASTER_TIMEOUT)
        try:
            start.wait(30)
            for cycle in range(CYCLES):
                lock = rl.lock(f"cold:{index}:{cycle}", TTL)
                try:
                    if lock.acquire(blocking=False):
                        release(lock)
                    else:
                        other_failures.append(f"{index}/{cycle}: not acquired {lock.last_votes}")
                except QuorumUnreachable as exc:
                    if cycle == 0 or not all_timed_out(exc.votes):
                        unreachable.append(f"{index}/{cycle}: {exc}")
                except HiredlockError as exc:
                    other_failures.append(f"{index}/{cycle}: {exc!r}")
        finally:
            rl.close()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    assert not unreachable, f"{len(unreachable)} of {THREADS * CYCLES}: {unreachable[:3]}"
    assert not other_failures, other_failures[:3]
