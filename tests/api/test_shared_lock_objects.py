"""One lock object shared by the threads (or tasks) of a process behaves as threading.Lock (or
asyncio.Lock) does: while one of them holds it, another's blocking acquire() waits for the
release (within its timeout) and a non-blocking one returns False. No two of them are ever inside
the section together, nobody gets an exception for sharing, and no key is left behind.

The occupancy counter is the oracle: each thread increments it on entering the section and
decrements it on leaving; it must never exceed one (or the semaphore's permits).
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from aio_support import run_async  # noqa: F401  (the fixture)
from apis import make_redlock_fixture, pytest_generate_tests, rwlock  # noqa: F401  (both APIs)
from support import EVENTUAL, assert_no_key, kb, urls, wait_until

from hiredlock import Redlock
from hiredlock.aio import AsyncRedlock

THREADS = 8
TTL = 10.0  # long: a key left behind is seen, not hidden by its expiry
# What is tested is the local gate, not the masters' speed: a round may wait long for its replies
# (with the ttl's default of 50 ms, a release on a loaded machine timed out and raised LockLost);
# short enough that a waiting mark (its window is 2 x this + 3000 x retry_delay) lasts under 1 s.
MASTER_TIMEOUT = 0.3


class Occupancy:
    """How many threads are inside the section now, the most ever seen, and what went wrong."""

    def __init__(self) -> None:
        self._mutex = threading.Lock()
        self.inside = 0
        self.most = 0
        self.entries = 0
        self.errors: list[BaseException] = []

    def enter(self) -> None:
        with self._mutex:
            self.inside += 1
            self.entries += 1
            self.most = max(self.most, self.inside)

    def leave(self) -> None:
        with self._mutex:
            self.inside -= 1


def _loop_on(enter_section, seconds: float, threads: int = THREADS) -> Occupancy:
    """`threads` threads each loop `with enter_section():` for `seconds`, counting occupancy."""
    occupancy = Occupancy()
    start = threading.Barrier(threads)
    stop_at = time.monotonic() + seconds + 0.2

    def work() -> None:
        start.wait()
        try:
            while time.monotonic() < stop_at:
                with enter_section():
                    occupancy.enter()
                    time.sleep(0.0005)  # (the section's work: lets another thread run)
                    occupancy.leave()
        except BaseException as exc:  # every error is the test's failure
            occupancy.errors.append(exc)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert not any(worker.is_alive() for worker in workers), "a thread is stuck in the section"
    return occupancy


def _check(occupancy: Occupancy, most: int = 1) -> None:
    assert not occupancy.errors, f"{len(occupancy.errors)} errors, first: {occupancy.errors[0]!r}"
    assert occupancy.most <= most, f"{occupancy.most} threads were inside at once"
    assert occupancy.entries > THREADS, f"only {occupancy.entries} entries in all"


def test_a_lock_shared_by_threads_lets_one_in_at_a_time(make_redlock, masters5, key):
    servers = masters5[:3]
    rl = make_redlock(urls(servers), retry_delay=0.01, master_timeout=MASTER_TIMEOUT)
    lock = rl.lock(key, TTL)
    occupancy = _loop_on(lambda: lock, 3.0)
    _check(occupancy)
    assert_no_key(servers, key, "after the threads' last release")


@pytest.mark.each_value_once
@pytest.mark.parametrize("kind", ["fair", "read", "write", "rlock", "permit"])
def test_each_kind_shared_by_threads_lets_one_in_at_a_time(make_redlock, masters5, key, kind):
    """A fair lock, one side of a read-write lock, an RLock (per thread, as ever) and one
    Permit object: each object has one holder at a time."""
    servers = masters5[:3]
    rl = make_redlock(urls(servers), retry_delay=0.01, master_timeout=MASTER_TIMEOUT)
    if kind == "fair":
        obj = rl.lock(key, TTL, fair=True)
    elif kind == "read":
        obj = rwlock(rl, key, TTL).read()
    elif kind == "write":
        obj = rwlock(rl, key, TTL).write()
    elif kind == "rlock":
        obj = rl.rlock(key, TTL)
    else:
        permit = rl.semaphore(key, 2, TTL).acquire(blocking=False)
        assert permit is not None
        permit.release()
        obj = permit  # a Permit is a lock on its own key: it can be taken again
    occupancy = _loop_on(lambda: obj, 1.0)
    _check(occupancy)
    assert not lasting_keys(servers, key), "left after the last release"


def lasting_keys(servers, name: str, timeout: float = EVENTUAL) -> list:
    """The keys of `name` (its own and its kind's) that would outlive a waiting window: a
    refused writer's or reader's waiting mark lasts the window (well under a second here), a
    key left behind would last its ttl. Polls until there are none, or the timeout: a master
    that lagged may run the last release a moment after it returned."""
    deadline = time.monotonic() + timeout
    while True:
        found = []
        for server in servers:
            admin = server.admin()
            found += [
                (server.port, k, admin.pttl(k))
                for k in admin.keys("*")
                if kb(name) in k and b"fence" not in k and not 0 < admin.pttl(k) < 1000
            ]
        if not found or time.monotonic() > deadline:
            return found
        time.sleep(0.01)


def test_a_semaphore_shared_by_threads_admits_its_permits(make_redlock, masters5, key):
    servers = masters5[:3]
    rl = make_redlock(urls(servers), retry_delay=0.01, master_timeout=MASTER_TIMEOUT)
    semaphore = rl.semaphore(key, 3, TTL)
    occupancy = _loop_on(lambda: semaphore, 1.0)
    _check(occupancy, most=3)
    assert not lasting_keys(servers, key), "left after the last release"


def test_a_non_blocking_acquire_of_a_lock_another_thread_holds_is_false(
    make_redlock, masters5, key
):
    rl = make_redlock(urls(masters5[:3]), master_timeout=MASTER_TIMEOUT)
    lock = rl.lock(key, TTL)
    assert lock.acquire(blocking=False)
    outcome: list = []
    other = threading.Thread(target=lambda: outcome.append(lock.acquire(blocking=False)))
    other.start()
    other.join(30)
    assert outcome == [False], "another thread's try must fail while the lock object is held"
    assert lock.held, "the holder's lock must be untouched"
    timed_out: list = []
    other = threading.Thread(target=lambda: timed_out.append(lock.acquire(timeout=0.2)))
    other.start()
    other.join(30)
    assert timed_out == [False], "a blocking acquire must give up at its timeout"
    lock.release()
    assert_no_key(masters5[:3], key)


def test_a_waiting_thread_gets_the_lock_object_once_it_is_released(make_redlock, masters5, key):
    rl = make_redlock(urls(masters5[:3]), retry_delay=0.01, master_timeout=MASTER_TIMEOUT)
    lock = rl.lock(key, TTL)
    assert lock.acquire()
    waiting = threading.Event()
    got: list = []

    def wait_for_it() -> None:
        waiting.set()
        got.append(lock.acquire(timeout=30))
        lock.release()

    other = threading.Thread(target=wait_for_it)
    other.start()
    waiting.wait(30)
    lock.release()
    other.join(60)
    assert got == [True]
    assert_no_key(masters5[:3], key)


def test_the_next_holders_release_follows_its_own_acquire_on_a_stopped_master(
    engine, masters5, key
):
    """Threads sharing a lock object: the holder's release waits on a stopped master while the
    next holder takes the lock on the two others, its SET queued behind on the stopped one. That
    next holder's release must go out behind its own SET, on the same connection: on another one
    (the first holder's, whose round ended last), the resumed master may run the release first
    and keep the key for its whole ttl."""
    servers = masters5[:3]
    stopped = servers[2]
    rl = Redlock(urls(servers), backend=engine, master_timeout=0.1, retry_delay=0.01)
    lock = rl.lock(key, TTL)
    assert lock.acquire(blocking=False)
    got: list = []
    next_holder = threading.Thread(target=lambda: got.append(lock.acquire(timeout=30)))
    stopped.stop()
    try:
        next_holder.start()
        # (the gate of the lock object: the next holder waits there for the release)
        wait_until(lambda: lock._gate.waiting, 30, "the next holder waits for the lock object")
        lock.release()  # (its round waits for the stopped master until master_timeout)
        next_holder.join(30)
        assert got == [True], "the next holder takes the lock on two masters of three"
        lock.release()
    finally:
        stopped.cont()
    assert_no_key(servers, key, "after the resumed master ran what was queued for it")
    rl.close()


def test_a_permits_release_follows_its_own_acquire_when_another_threads_release_ends_later(
    engine, masters5, key
):
    """Threads sharing a semaphore: one thread's release of its permit waits on a stopped master
    while another thread takes a permit on the two others. That permit's release must go out
    behind its own acquire on the stopped master, whichever round of the semaphore ended last."""
    servers = masters5[:3]
    stopped = servers[2]
    rl = Redlock(urls(servers), backend=engine, master_timeout=0.5, retry_delay=0.01)
    semaphore = rl.semaphore(key, 2, TTL)
    first = semaphore.acquire(blocking=False)
    assert first is not None
    stopped.stop()
    try:
        releasing = threading.Thread(target=first.release)
        releasing.start()
        # (let go locally first: its round to the masters is under way from then on)
        wait_until(lambda: not first.held, 30, "the first permit is let go")
        second = semaphore.acquire(blocking=False)
        assert second is not None, "a permit is taken on two masters of three"
        releasing.join(30)
        second.release()
    finally:
        stopped.cont()
    assert not lasting_keys(servers, key), "left after the resumed master ran its queue"
    rl.close()


TASKS = 100


def test_one_async_lock_shared_by_many_tasks(engine, masters5, key, run_async):  # noqa: F811
    servers = masters5[:3]

    async def main() -> Occupancy:
        occupancy = Occupancy()
        async with AsyncRedlock(
            urls(servers), backend=engine, retry_delay=0.01, master_timeout=MASTER_TIMEOUT
        ) as rl:
            lock = rl.lock(key, TTL)
            stop_at = time.monotonic() + 3.0

            async def work() -> None:
                try:
                    while time.monotonic() < stop_at:
                        async with lock:
                            occupancy.enter()
                            await asyncio.sleep(0)
                            occupancy.leave()
                except BaseException as exc:
                    occupancy.errors.append(exc)

            await asyncio.gather(*(work() for _ in range(TASKS)))
        return occupancy

    occupancy = run_async(main())
    _check(occupancy)
    assert_no_key(servers, key, "after the tasks' last release")
