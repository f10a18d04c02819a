"""close() and aclose() settle what is in flight: an acquire running when the client closes either
returns before close() does (and close() releases what it won) or unlocks what it won and raises;
when close() returns no key of ours is left on any master. A holder whose release races close()
gets no error, and close() logs nothing for a lock that was just released. Blocked waiters learn
of the close at once, not at their next attempt.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest
from aio_support import run_async  # noqa: F401  (the fixture)
from support import kb, set_foreign, urls
from test_interrupts import TTL, make_waiter

from hiredlock import HiredlockError, Redlock
from hiredlock.aio import AsyncRedlock

THREADS = 16
KINDS = ["lock", "fair", "read", "semaphore"]


def keys_of(servers, prefix: str, but: frozenset = frozenset()) -> list:
    """The keys on the masters whose name contains `prefix` (a test's names and their kind's
    keys), except those in `but` and the waiting marks of refused attempts (they last a waiting
    window, well under a second here; a key left behind would last its ttl)."""
    found = []
    for server in servers:
        admin = server.admin()
        for k in admin.keys("*"):
            if kb(prefix) in k and k not in but and not 0 < admin.pttl(k) < 1000:
                found.append((server.port, k, admin.type(k), admin.pttl(k)))
    return found


def take(rl, kind: str, name: str, blocking: bool):
    """One acquire of `kind` on `name`; what to release afterwards (None: not acquired)."""
    waiter = make_waiter(rl, kind, name)
    if kind == "semaphore":
        return waiter.acquire(blocking=blocking)
    return waiter if waiter.acquire(blocking=blocking) else None


@pytest.mark.parametrize("kind", KINDS)
def test_close_with_acquires_in_flight_leaves_no_key(engine, masters5, key, kind, caplog):
    servers = masters5[:3]
    rl = Redlock(urls(servers), backend=engine, retry_delay=0.005, master_timeout=0.2)
    rl.connect()
    errors: list = []
    running = threading.Barrier(THREADS + 1)

    def loop(i: int) -> None:
        running.wait()
        n = 0
        while True:
            n += 1
            try:
                held = take(rl, kind, f"{key}:{i}:{n % 4}", blocking=n % 2 == 0)
            except HiredlockError:
                if rl.closed:
                    return  # refused: the client was closed
                raise
            except BaseException as exc:
                errors.append(exc)
                return
            if held is not None:
                try:
                    held.release()  # (close() may have released it first: no error either way)
                except BaseException as exc:
                    errors.append(exc)
                    return

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    running.wait()
    time.sleep(0.3)  # (the threads' acquires and releases are under way: close in their middle)
    with caplog.at_level(logging.WARNING, logger="hiredlock"):
        rl.close()
        left = keys_of(servers, key)
        for thread in threads:
            thread.join(30)
    assert not left, f"{len(left)} keys left when close() returned: {left[:4]}"
    assert not errors, f"{len(errors)} errors, first: {errors[0]!r}"
    assert not keys_of(servers, key), "keys left after the threads ended"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text


BURST = 20


@pytest.mark.parametrize("kind", KINDS)
def test_aclose_with_acquires_in_flight_leaves_no_key(
    engine,
    masters5,
    key,
    run_async,  # noqa: F811
    kind,
):
    """20 acquires in flight (some waiting on names a foreign holder has) when aclose() begins:
    when it returns, none holds anything and no key of ours is left."""
    servers = masters5[:3]
    foreign = []
    for i in range(0, BURST, 2):
        name = f"{key}:{i}"
        if kind == "semaphore":
            foreign += [f"hiredlock:permit:{p}:{name}" for p in range(2)]
        elif kind == "read":
            foreign.append(f"hiredlock:rw:w:{name}")
        else:
            foreign.append(name)
    for foreign_key in foreign:
        set_foreign(servers, foreign_key, px=int(TTL * 1000))
    but = frozenset(kb(foreign_key) for foreign_key in foreign)

    async def main() -> tuple:
        rl = AsyncRedlock(urls(servers), backend=engine, retry_delay=0.01, master_timeout=0.2)
        await rl.connect()
        made = []

        async def acquire(i: int):
            waiter = make_waiter(rl, kind, f"{key}:{i}")
            if kind == "semaphore":
                permit = await waiter.acquire()
                made.append(permit)
                return permit is not None
            made.append(waiter)
            return await waiter.acquire()

        tasks = [asyncio.ensure_future(acquire(i)) for i in range(BURST)]
        await asyncio.sleep(0.05)  # (the free names' acquires have gone out, the others wait)
        started = time.monotonic()
        await rl.aclose()
        closing = time.monotonic() - started
        left = keys_of(servers, key, but)
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        return left, outcomes, [obj for obj in made if obj is not None and obj.held], closing

    left, outcomes, held, closing = run_async(main())
    assert not held, f"{len(held)} locks held after aclose()"
    odd = [o for o in outcomes if not isinstance(o, (bool, HiredlockError))]
    assert not odd, f"acquires ended otherwise than with a bool or HiredlockError: {odd[:3]}"
    assert not left, f"{len(left)} keys of ours left when aclose() returned: {left[:4]}"
    assert closing < 5.0, f"aclose() took {closing:.2f} s"


@pytest.mark.parametrize("wake", [False, True], ids=["timer", "notices"])
def test_waiters_learn_of_close_at_once(engine, masters5, key, wake):
    """Waiters blocked on a name a foreign holder has, with a long retry_delay, waiting on the
    retry timer or for a release notice: close() ends their waits at once."""
    servers = masters5[:3]
    set_foreign(servers, key, px=int(TTL * 1000))
    rl = Redlock(urls(servers), backend=engine, retry_delay=10.0, wake=wake)
    outcomes: list = []
    waiting = threading.Barrier(5)

    def wait_for_it() -> None:
        lock = rl.lock(key, TTL)
        waiting.wait()
        try:
            outcomes.append(lock.acquire())
        except HiredlockError as exc:
            outcomes.append(exc)
        outcomes.append(time.monotonic())

    threads = [threading.Thread(target=wait_for_it) for _ in range(4)]
    for thread in threads:
        thread.start()
    waiting.wait()
    time.sleep(0.2)  # (their first attempts failed: they are in their pauses)
    started = time.monotonic()
    rl.close()
    for thread in threads:
        thread.join(30)
    ended = [o for o in outcomes if isinstance(o, float)]
    assert len(ended) == 4
    assert all(isinstance(o, HiredlockError) for o in outcomes if not isinstance(o, float))
    # (a retry_delay of 10 s: a waiter that learnt of the close at its next attempt would end
    # 5-15 s later)
    assert max(ended) - started < 2.0, f"the waiters ended {max(ended) - started:.2f} s later"


@pytest.mark.parametrize("wake", [False, True], ids=["timer", "notices"])
def test_async_waiters_learn_of_close_at_once(engine, masters5, key, run_async, wake):  # noqa: F811
    servers = masters5[:3]
    set_foreign(servers, key, px=int(TTL * 1000))

    async def main() -> float:
        rl = AsyncRedlock(urls(servers), backend=engine, retry_delay=10.0, wake=wake)
        tasks = [asyncio.ensure_future(rl.lock(key, TTL).acquire()) for _ in range(4)]
        await asyncio.sleep(0.2)
        started = time.monotonic()
        await rl.aclose()
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        assert all(isinstance(o, HiredlockError) for o in outcomes), outcomes
        return time.monotonic() - started

    late = run_async(main())
    assert late < 2.0, f"the waiters ended {late:.2f} s after aclose() began"


def test_async_with_exit_racing_aclose_is_silent(engine, masters5, key, run_async, caplog):  # noqa: F811
    servers = masters5[:3]

    async def main() -> list:
        rl = AsyncRedlock(urls(servers), backend=engine)
        inside = asyncio.Event()
        count = 0
        errors = []

        async def hold(i: int) -> None:
            nonlocal count
            try:
                async with rl.lock(f"{key}:{i}", TTL):
                    count += 1
                    if count == 20:
                        inside.set()
                    await asyncio.sleep(0.001 * (i % 5))
            except BaseException as exc:
                errors.append(exc)

        tasks = [asyncio.ensure_future(hold(i)) for i in range(20)]
        await inside.wait()
        await rl.aclose()
        await asyncio.gather(*tasks)
        return errors

    with caplog.at_level(logging.WARNING, logger="hiredlock"):
        errors = run_async(main())
    assert not errors, f"{len(errors)} holders got an error: {errors[:3]}"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    assert not keys_of(servers, key)
