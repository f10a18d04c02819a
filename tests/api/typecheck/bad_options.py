"""Misspelt and misplaced options of the lock makers: tests/api/test_typing.py runs
`mypy --strict` on this file and expects an error on each line marked `# error: <option>`,
naming that option, and on no other line. (Type-checked only, never run.)"""

from __future__ import annotations

from hiredlock import Redlock
from hiredlock.aio import AsyncRedlock


def sync_calls(redlock: Redlock) -> None:
    redlock.lock("n", 10, ttl_ms=5)  # error: ttl_ms
    redlock.lock("n", 10, fair=True, blocking_timout=1)  # error: blocking_timout
    redlock.rlock("n", 10, auto_renw=True)  # error: auto_renw
    redlock.rlock("n", 10, fair=True)  # error: fair
    redlock.semaphore("n", 3, 10, max_extension=1)  # error: max_extension
    redlock.rwlock("n", 10, on_lose=print)  # error: on_lose
    redlock.synchronized("n", 10, wakes=False)  # error: wakes
    redlock.lock("n", 10, blocking_timeout=1, auto_renew=True, fencing=True, wake=None)


async def async_calls(redlock: AsyncRedlock) -> None:
    redlock.lock("n", 10, ttl_ms=5)  # error: ttl_ms
    redlock.lock("n", 10, fair=True, blocking_timout=1)  # error: blocking_timout
    redlock.rlock("n", 10, auto_renw=True)  # error: auto_renw
    redlock.semaphore("n", 3, 10, fair=True)  # error: fair
    redlock.rwlock("n", 10, maxhold=5)  # error: maxhold
    redlock.synchronized("n", 10, fencng=True)  # error: fencng
    redlock.rwlock("n", 10, max_hold=5, auto_renew=True, max_extensions=2)
