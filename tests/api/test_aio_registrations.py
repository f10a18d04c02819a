"""hiredlock.aio keeps each connection's reader on the loop between rounds (aio/_driver.py): what is
registered must stay true. Real servers, both engines, the asyncio loop and uvloop:

- after aclose() no descriptor the client used has a reader or a writer on the loop;
- connections the master closes while the loop does not run (their descriptors closed and
  reopened, most likely under the same numbers, inside the next round's begin()) are registered
  afresh: the next cycle is answered at once, not after the master timeout;
- connections the master closes while the loop runs (the kept readers fire with no round to
  feed) come off the loop, and the next cycle is answered as well.
"""

from __future__ import annotations

import asyncio
import os
import time

from aio_support import run_async  # noqa: F401  (the fixture)
from support import urls

from hiredlock.aio import AsyncRedlock

TTL = 10.0
MASTER_TIMEOUT = 2.0


def open_fds() -> set[int]:
    return {int(name) for name in os.listdir("/proc/self/fd")}


def kill_clients(servers) -> None:
    """Closes every client connection but the admin's own, and waits until the server did."""
    for srv in servers:
        srv.admin().execute_command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
    time.sleep(0.1)  # blocking: the loop sees nothing of it


async def cycle(lock) -> float:
    """One acquire(blocking=False) + release; its time in seconds."""
    start = time.monotonic()
    assert await lock.acquire(blocking=False)
    await lock.release()
    return time.monotonic() - start


def test_nothing_left_on_the_loop_after_aclose(engine, masters5, key, run_async):  # noqa: F811
    async def main() -> None:
        loop = asyncio.get_running_loop()
        before = open_fds()
        rl = AsyncRedlock(urls(masters5[:3]), backend=engine, master_timeout=MASTER_TIMEOUT)
        lock = rl.lock(key, TTL)
        for _ in range(5):
            await cycle(lock)
        used = open_fds() - before
        assert used, "the client's connections"
        await rl.aclose()
        for fd in used:
            assert not loop.remove_reader(fd), f"fd {fd} still has a reader on the loop"
            assert not loop.remove_writer(fd), f"fd {fd} still has a writer on the loop"

    run_async(main())


def test_connections_closed_while_the_loop_waits(engine, masters5, key, run_async):  # noqa: F811
    async def main() -> None:
        async with AsyncRedlock(
            urls(masters5[:3]), backend=engine, master_timeout=MASTER_TIMEOUT
        ) as rl:
            lock = rl.lock(key, TTL)
            for _ in range(3):
                await cycle(lock)
            for _ in range(3):
                kill_clients(masters5[:3])
                # (a registration left on a closed descriptor: its new socket never reported)
                assert await cycle(lock) < MASTER_TIMEOUT / 2
                await cycle(lock)

    run_async(main())


def test_connections_closed_while_the_loop_runs(engine, masters5, key, run_async):  # noqa: F811
    async def main() -> None:
        async with AsyncRedlock(
            urls(masters5[:3]), backend=engine, master_timeout=MASTER_TIMEOUT
        ) as rl:
            lock = rl.lock(key, TTL)
            for _ in range(3):
                await cycle(lock)
            for _ in range(3):
                kill_clients(masters5[:3])
                await asyncio.sleep(0.05)  # the kept readers see the end of their streams
                assert await cycle(lock) < MASTER_TIMEOUT / 2
                await cycle(lock)

    run_async(main())
