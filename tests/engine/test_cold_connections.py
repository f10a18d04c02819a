"""Cold connections do not cost votes.

Twenty threads, each with a fresh Redlock on five healthy masters, lock and unlock at once with a
10 ms master_timeout: every first round opens five connections and logs in while the other
threads hold the GIL. A connection opened in a round has CONNECT_TIMEOUT_MIN_MS from the round's
start for the connect, the login and the replies, so these rounds do not fail for want of answers.
The releases run on warm connections with the plain 10 ms deadline: under twenty threads taking
turns on the GIL a release may time out (the key then expires after its 0.2 s ttl); any other
release failure still fails the test.
"""

from __future__ import annotations

import threading

from support import urls

from hiredlock import HiredlockError, LockLost, Outcome, QuorumUnreachable, Redlock

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
