"""A program using hiredlock's public API as a user would, checked with `mypy --strict` by
tests/api/test_typing.py (it is type-checked, not run): every type it relies on is the API's
promise."""

from __future__ import annotations

import asyncio
import datetime
from typing import Optional

from typing_extensions import assert_type

import hiredlock
from hiredlock import (
    FairLock,
    KeyState,
    Lock,
    LockLost,
    LockNotAcquired,
    Permit,
    ReadLock,
    Redlock,
    RLock,
    RWLock,
    Semaphore,
    Vote,
    WriteLock,
)
from hiredlock.aio import (
    AsyncFairLock,
    AsyncLock,
    AsyncPermit,
    AsyncReadLock,
    AsyncRedlock,
    AsyncRLock,
    AsyncRWLock,
    AsyncSemaphore,
    AsyncWriteLock,
)
from hiredlock.pytest_plugin import MakeMemoryMasters, RedisServers, StartRedisServers
from hiredlock.testing import MemoryMasters

MASTERS = ["redis://127.0.0.1:6379/0", "redis://127.0.0.1:6380/0", "redis://127.0.0.1:6381/0"]


def on_lost(lock: Lock) -> None:
    print(f"lost {lock.name!r}: {lock.last_votes}")


def blocking_program() -> int:
    with Redlock(MASTERS, retry_count=5, retry_delay=0.1, backend="auto") as redlock:
        assert_type(redlock, Redlock)
        votes = redlock.connect()
        assert_type(votes, tuple[Vote, ...])

        lock = redlock.lock("report", 30, blocking_timeout=5, auto_renew=True, on_lost=on_lost)
        assert_type(lock, Lock)
        with lock as held:
            assert_type(held, Lock)
            print(held.token, held.validity, held.fence, held.lost.is_set())
            held.extend(datetime.timedelta(seconds=10))

        fair = redlock.lock("queue", 30, fair=True, wake=False)
        assert_type(fair, FairLock)
        with fair as fair_held:
            assert_type(fair_held, FairLock)
        maybe_fair = redlock.lock("queue", 30, fair=len(MASTERS) > 2)
        assert_type(maybe_fair, Lock)
        plain = redlock.lock("plain", 30, fair=False, fencing=True, max_extensions=3)
        assert_type(plain, Lock)

        rlock = redlock.rlock("tree", 10, blocking_timeout=1.5)
        assert_type(rlock, RLock)
        with rlock as outer, rlock as inner:
            assert_type(outer, RLock)
            assert_type(inner.count, int)
            inner_lock: Optional[Lock] = inner.lock
            print(inner_lock)

        semaphore = redlock.semaphore("pool", 3, 20, auto_renew=True, max_hold=60)
        assert_type(semaphore, Semaphore)
        with semaphore as permit:
            assert_type(permit, Permit)
        got = semaphore.acquire(blocking=False)
        assert_type(got, Optional[Permit])
        if got is not None:
            got.release()
        print(semaphore.last_votes, semaphore.held)

        rw = redlock.rwlock("table", 15, blocking_timeout=2)
        assert_type(rw, RWLock)
        with rw.read() as reader:
            assert_type(reader, ReadLock)
        with rw.write() as writer:
            assert_type(writer, WriteLock)

        try:
            if not lock.acquire(blocking=True, timeout=0.5):
                last: tuple[Vote, ...] = lock.last_votes
                print([(vote.master, vote.outcome.name, vote.detail) for vote in last])
        except LockNotAcquired as exc:
            print(exc.votes)
        finally:
            try:
                lock.release()
            except LockLost as exc:
                print(exc.votes)

        many = redlock.acquire_many(["a", "b", b"c"], 10)
        assert_type(many, list[Optional[Lock]])
        redlock.release_many(one for one in many if one is not None)

        states = redlock.inspect("report")
        assert_type(states, list[KeyState])
        print([(s.master, s.exists, s.pttl_ms, s.ours) for s in states], redlock.locked("report"))
        redlock.delete_fence_counter("report")

        @redlock.synchronized(lambda order: f"order:{order}", 10, blocking_timeout=1, fair=True)
        def ship(order: int) -> str:
            return f"shipped {order}"

        assert_type(ship(42), str)
        print(hiredlock.MAX_TTL, hiredlock.available_backends(), redlock.quorum)
    return 0


def on_lost_async(lock: AsyncLock) -> None:
    print(f"lost {lock.name!r}")


async def async_program() -> None:
    async with AsyncRedlock(MASTERS, master_timeout=0.05) as redlock:
        assert_type(redlock, AsyncRedlock)
        assert_type(await redlock.connect(), tuple[Vote, ...])

        lock = redlock.lock("report", 30, auto_renew=True, on_lost=on_lost_async)
        assert_type(lock, AsyncLock)
        async with lock as held:
            assert_type(held, AsyncLock)
            await held.extend()
            assert_type(held.lost, asyncio.Event)

        fair = redlock.lock("queue", 30, fair=True)
        assert_type(fair, AsyncFairLock)
        async with fair as fair_held:
            assert_type(fair_held, AsyncFairLock)

        rlock = redlock.rlock("tree", 10)
        assert_type(rlock, AsyncRLock)
        async with rlock as outer:
            assert_type(outer, AsyncRLock)
            assert_type(outer.last_votes, tuple[Vote, ...])

        semaphore = redlock.semaphore("pool", 3, 20, blocking_timeout=3)
        assert_type(semaphore, AsyncSemaphore)
        async with semaphore as permit:
            assert_type(permit, AsyncPermit)
        assert_type(await semaphore.acquire(False), Optional[AsyncPermit])

        rw = redlock.rwlock("table", 15)
        assert_type(rw, AsyncRWLock)
        async with rw.read() as reader:
            assert_type(reader, AsyncReadLock)
        async with rw.write() as writer:
            assert_type(writer, AsyncWriteLock)

        if not await lock.acquire(timeout=1):
            assert_type(lock.last_votes, tuple[Vote, ...])
        many = await redlock.acquire_many(["a", "b"], 10)
        assert_type(many, list[Optional[AsyncLock]])
        await redlock.release_many(one for one in many if one is not None)
        assert_type(await redlock.inspect("report"), list[KeyState])
        assert_type(await redlock.locked("report"), bool)

        @redlock.synchronized("job", 10, auto_renew=True)
        async def job(n: int) -> int:
            return n * 2

        assert_type(await job(21), int)


def test_with_the_pytest_plugin(
    redis_servers: StartRedisServers, memory_masters: MakeMemoryMasters
) -> None:
    """A user's test annotated with the plugin's fixture types."""
    servers = redis_servers(3)
    assert_type(servers, RedisServers)
    assert_type(servers.urls, list[str])
    assert_type(servers.pids, list[int])
    assert_type(servers.alive(0), bool)
    servers.stop(0)
    servers.resume(0)
    servers.kill(1)
    servers.restart(1)
    masters = memory_masters()
    assert_type(masters, MemoryMasters)
    masters.advance(11)
    with Redlock(servers.urls) as on_servers, Redlock(masters) as in_memory:
        assert_type(on_servers.lock("report", 10), Lock)
        assert_type(in_memory.lock("report", 10), Lock)


if __name__ == "__main__":
    blocking_program()
    asyncio.run(async_program())
