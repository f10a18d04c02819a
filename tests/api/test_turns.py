"""The blocking acquires of one client on one name take turns at the masters (_core/turns.py):
while one of them contends, the others wait in this process, with no attempt of their own, and
each gets its turn when the one before ends (acquired, given up or failed). Each waiter here has
a lock object of its own (threads for the sync API, tasks for asyncio's)."""

from __future__ import annotations

import threading

from apis import make_redlock_fixture, pytest_generate_tests  # noqa: F401  (both APIs)
from support import wait_until

from hiredlock import Event

WAITERS = 6
SHORT_TIMEOUT = 0.3


def attempts_made(server) -> int:
    """SET commands the master ran (a plain lock's attempt is a SET NX)."""
    stats = server.admin().info("commandstats")
    return int(stats.get("cmdstat_set", {}).get("calls", 0))


def test_waiters_behind_a_contending_one_make_no_attempt(make_redlock, masters5, key):
    """The name is held elsewhere. One waiter contends (its attempts reach the master); the
    others, with shorter deadlines, wait behind it and give up at their deadline without a single
    attempt (their acquire_failed event says 0 attempts). When the name is freed, the contending
    one gets it."""
    events: list[Event] = []
    server = masters5[0]
    rl = make_redlock([server.url], retry_delay=0.01, on_event=events.append)
    server.admin().set(key, b"someone-else", px=60_000)
    first = rl.lock(key, 10)
    got: list[bool] = []
    before = attempts_made(server)
    contender = threading.Thread(target=lambda: got.append(first.acquire(timeout=30)))
    contender.start()
    try:
        wait_until(lambda: attempts_made(server) >= before + 3, 10, "the first waiter's attempts")
        results: list[bool] = []
        others = [
            threading.Thread(
                target=lambda: results.append(rl.lock(key, 10).acquire(timeout=SHORT_TIMEOUT))
            )
            for _ in range(WAITERS)
        ]
        for thread in others:
            thread.start()
        for thread in others:
            thread.join(30)
        assert results == [False] * WAITERS
        failed = [event for event in events if event.kind == "acquire_failed"]
        assert len(failed) == WAITERS, failed
        assert [event.attempts for event in failed] == [0] * WAITERS
        assert all(event.reason == "not_acquired" for event in failed)
    finally:
        server.admin().delete(key)
        contender.join(30)
    assert got == [True]
    first.release()


def test_every_waiter_gets_a_turn_and_the_lock(make_redlock, masters5, key):
    """Waiters with no deadline all get the lock in turn once it is freed, one holder at a
    time, and nothing is left on the masters."""
    rl = make_redlock([server.url for server in masters5[:3]], retry_delay=0.01)
    masters5[0].admin().set(key, b"someone-else", px=60_000)
    masters5[1].admin().set(key, b"someone-else", px=60_000)
    inside = [0]
    most = [0]
    mutex = threading.Lock()
    done: list[bool] = []

    def waiter() -> None:
        lock = rl.lock(key, 10)
        acquired = lock.acquire(timeout=60)
        with mutex:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        with mutex:
            inside[0] -= 1
        lock.release()
        done.append(acquired)

    threads = [threading.Thread(target=waiter) for _ in range(WAITERS)]
    for thread in threads:
        thread.start()
    for server in masters5[:2]:
        server.admin().delete(key)
    for thread in threads:
        thread.join(60)
    assert done == [True] * WAITERS and most[0] == 1
    assert all(server.admin().get(key) is None for server in masters5[:3])
