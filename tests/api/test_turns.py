"""The blocking acquires of one client on one name take turns at the masters (_core/turns.py):
while one of them contends, the others wait in this process, with no attempt of their own, and
each gets its turn when the one before ends (acquired, given up or failed). Each waiter here has
a lock object of its own (threads for the sync API, tasks for asyncio's)."""

from __future__ import annotations

import asyncio
import functools
import gc
import threading
import weakref
from typing import Any, Callable

import pytest
from aio_support import run_async  # noqa: F401  (the fixture)
from apis import make_redlock_fixture, pytest_generate_tests, sync_only  # noqa: F401
from support import InThread, braced, urls, values, wait_until

from hiredlock import Event, HiredlockError
from hiredlock.aio import AsyncRedlock

WAITERS = 6
SHORT_TIMEOUT = 0.3
# A retry timer (10 to 30 s) that never fires within a test: what wakes a waiter is a release.
SLOW_RETRY = 20.0


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


# -- the turn after a sibling's that took the lock -------------------------------------------------


def _client(rl: Any) -> Any:
    return getattr(rl, "_target", rl)  # (the AsyncRedlock behind the async API's facade)


def waits_on_notices(rl, key) -> int:
    """The client's waits now under way on the release notices of `key`."""
    board = _client(rl).session.notices._board
    return len(board.waiters.get(b"hiredlock:released:" + braced(key), ()))


def waiting_for_a_turn(rl) -> bool:
    """Whether some acquire of the client waits for its turn."""
    try:
        return any(gate.waiting for gate in list(_client(rl).session.turns._gates.values()))
    except RuntimeError:  # (the loop's thread changed a gate meanwhile: asked again)
        return False


def first_takes_it_second_waits(make_redlock, servers, key, second_timeout, **options):
    """A name another client holds; two sibling lock objects of a client of their own (made with
    `options`) wait on it: `first` refused and waiting for a release notice, `second` behind it
    for its turn (its acquire's timeout `second_timeout`). The other client releases and `first`
    takes the lock. Returns (the client, first, second, second's call)."""
    foreign = make_redlock(urls(servers)).lock(key, 60)
    assert foreign.acquire(blocking=False)
    rl = make_redlock(urls(servers), **options)
    first, second = rl.lock(key, 60), rl.lock(key, 60)
    # (partial, not a lambda: nothing here keeps `first` alive once the caller drops it)
    took_first = InThread(functools.partial(first.acquire, timeout=60))
    wait_until(lambda: waits_on_notices(rl, key) == 1, 10, "the first waiter refused, waiting")
    took_second = InThread(functools.partial(second.acquire, timeout=second_timeout))
    wait_until(lambda: waiting_for_a_turn(rl), 10, "the second waiter behind the first")
    foreign.release()  # (its notices wake the first waiter; late ones must not wake the second)
    assert took_first.result() is True
    return rl, first, second, took_second


def test_after_a_sibling_took_the_lock_the_next_waiter_waits_for_its_release(
    make_redlock, masters5, key
):
    """The turn after one whose acquire took the lock (a sibling in the client holds it) makes
    no attempt while the lock stays held: it waits for the release, then gets the lock with one
    attempt (its acquired event says 1; its first attempt used to go out at once and find the
    lock held)."""
    events: list[Event] = []
    servers = masters5[:3]
    rl, first, second, took_second = first_takes_it_second_waits(
        make_redlock, servers, key, 60, retry_delay=SLOW_RETRY, on_event=events.append
    )
    wait_until(lambda: waits_on_notices(rl, key) == 1, 10, "the second waiter waiting")
    assert not took_second.done.is_set()
    first.release()
    assert took_second.result() is True
    acquired = [event for event in events if event.kind == "acquired"]
    assert len(acquired) == 2 and acquired[1].attempts == 1, acquired
    second.release()
    assert all(server.admin().get(key) is None for server in servers)


def test_after_a_sibling_took_the_lock_the_next_waiter_still_tries_at_its_timer(
    make_redlock, masters5, key
):
    """No release comes (the sibling keeps the lock): the waiter after it still tries the
    masters at its retry timer (every 25 to 75 ms here), and gives up at its deadline, refused
    (its acquire_failed event counts its attempts: more than the one after its deadline)."""
    events: list[Event] = []
    servers = masters5[:3]
    _rl, first, _second, took_second = first_takes_it_second_waits(
        make_redlock, servers, key, 1.0, retry_delay=0.05, on_event=events.append
    )
    assert took_second.result() is False
    failed = [event for event in events if event.kind == "acquire_failed"]
    assert len(failed) == 1 and failed[0].attempts >= 2, failed
    assert failed[0].reason == "not_acquired"
    first.release()
    assert all(server.admin().get(key) is None for server in servers)


def test_closing_the_client_ends_the_wait_for_a_siblings_release(make_redlock, masters5, key):
    """close() while a waiter waits for its sibling's release (its retry timer 10 to 30 s
    away): the wait ends, and its acquire raises HiredlockError (the client is closed) well
    before that timer."""
    servers = masters5[:3]
    rl, _first, _second, took_second = first_takes_it_second_waits(
        make_redlock, servers, key, 60, retry_delay=SLOW_RETRY
    )
    wait_until(lambda: waits_on_notices(rl, key) == 1, 10, "the second waiter waiting")
    rl.close()
    with pytest.raises(HiredlockError):
        took_second.result(timeout=8)  # (the retry timer: 10 s at the earliest)
    assert all(server.admin().get(key) is None for server in servers)  # (close() released)


@sync_only("the async API's facade keeps the objects it wraps")
def test_a_held_lock_its_caller_dropped_is_not_kept_by_the_turns(make_redlock, masters5, key):
    """A lock object whose turn took the lock, dropped by its caller while held (it is neither
    kept alive nor renewed: its keys expire with their ttl), is not kept alive either by the
    note its turn left for the waiter after it."""
    servers = masters5[:3]
    _rl, first, _second, took_second = first_takes_it_second_waits(
        make_redlock, servers, key, 1.0, retry_delay=SLOW_RETRY
    )
    dropped = weakref.ref(first)
    del first
    gc.collect()
    assert dropped() is None, "the turns kept a held lock its caller dropped"
    assert took_second.result() is False  # (the dropped lock's keys live until their ttl)
    for server in servers:
        server.admin().delete(key)


def test_a_waiter_cancelled_while_its_sibling_holds_the_lock(engine, masters5, key, run_async):  # noqa: F811
    """asyncio: three tasks of one client wait on a name held elsewhere. The first takes it when
    it is released; the second, whose turn comes next, is cancelled while it waits for the
    first's release: CancelledError, no attempt made (its acquire_failed event: interrupted, 0
    attempts). The third gets the turn, waits for that release in its turn, and takes the lock
    with one attempt. Nothing is left on the masters."""
    servers = masters5[:3]

    async def until(condition: Callable[[], bool], what: str) -> None:
        try:
            async with asyncio.timeout(10):
                while not condition():  # (each look gives the other tasks their turn of the loop)
                    await asyncio.sleep(0.001)
        except TimeoutError:
            raise AssertionError(f"timed out waiting for: {what}") from None

    async def main() -> tuple[list[Event], Any]:
        events: list[Event] = []
        async with AsyncRedlock(urls(servers), backend=engine) as other:
            foreign = other.lock(key, 60)
            assert await foreign.acquire(blocking=False)
            async with AsyncRedlock(
                urls(servers), backend=engine, retry_delay=SLOW_RETRY, on_event=events.append
            ) as rl:
                first, second, third = (rl.lock(key, 60) for _ in range(3))
                took_first = asyncio.create_task(first.acquire(timeout=60))
                await until(lambda: waits_on_notices(rl, key) == 1, "the first waiter waiting")
                took_second = asyncio.create_task(second.acquire(timeout=60))
                took_third = asyncio.create_task(third.acquire(timeout=60))
                await until(lambda: waiting_for_a_turn(rl), "the others behind it")
                await foreign.release()
                assert await took_first is True
                await until(lambda: waits_on_notices(rl, key) == 1, "the second one waiting")
                took_second.cancel()
                second_ended = (await asyncio.gather(took_second, return_exceptions=True))[0]
                await until(lambda: waits_on_notices(rl, key) == 1, "the third one waiting")
                await first.release()
                assert await took_third is True
                await third.release()
        return events, second_ended

    events, second_ended = run_async(main())
    assert isinstance(second_ended, asyncio.CancelledError), second_ended
    failed = [event for event in events if event.kind == "acquire_failed"]
    assert [(event.reason, event.attempts) for event in failed] == [("interrupted", 0)], failed
    acquired = [event for event in events if event.kind == "acquired"]
    assert len(acquired) == 2 and acquired[1].attempts == 1, acquired
    assert values(servers, key) == [None] * len(servers)
