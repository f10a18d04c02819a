"""Threads sharing a Redlock while a master is SIGSTOPped: once it resumes and runs what it had
buffered, no key of theirs is left there.

Each thread takes, extends and releases a lock of its own while master 0 is stopped: the rounds
time out on it and its commands wait in its socket buffers. Two connections to one master are
served in no promised order once it resumes, so a lock's release must reach it on the connection
its SET went out on; otherwise the release may run first and the SET leave the key behind, with
the holder's token, for its ttl.
"""

from __future__ import annotations

import threading

from support import urls, values

THREADS = 20
REPEATS = 4
TTL = 10.0  # far longer than the test: a leftover key is not hidden by its expiry
MASTER_TIMEOUT = 0.1


def cycles_in_threads(rl, names: list[str]) -> None:
    """Each name's lock taken, extended and released by a thread of its own, all at once."""
    errors: list[BaseException] = []
    start = threading.Barrier(len(names))

    def cycle(name: str) -> None:
        try:
            lock = rl.lock(name, TTL)
            start.wait()
            assert lock.acquire(blocking=False)
            lock.extend()
            lock.release()
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=cycle, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


def test_resumed_master_keeps_no_key_of_concurrent_threads(engine, make_redlock, masters5, key):
    stopped = masters5[0]
    leftovers = []
    for run in range(REPEATS):
        rl = make_redlock(urls(masters5), master_timeout=MASTER_TIMEOUT)
        warm = rl.lock(f"{key}:warm", TTL)  # every connection open before the stop
        assert warm.acquire(blocking=False)
        warm.release()
        names = [f"{key}:{run}:{i}" for i in range(THREADS)]
        stopped.stop()
        try:
            cycles_in_threads(rl, names)
        finally:
            stopped.cont()  # returns once the master has run every command it had buffered
        rl.close()
        left = [name for name in names if any(v is not None for v in values(masters5, name))]
        leftovers.append(len(left))
    assert not any(leftovers), f"names left on the resumed master in each run: {leftovers}"
