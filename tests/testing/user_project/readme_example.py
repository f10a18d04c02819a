import asyncio

import pytest

from hiredlock import LockLost, QuorumUnreachable, Redlock
from hiredlock.aio import AsyncRedlock


def test_the_job_sees_its_lock_expire(memory_masters):
    masters = memory_masters(5)  # in this process: no server, no socket
    with Redlock(masters) as redlock:
        lock = redlock.lock("report", ttl=10)
        assert lock.acquire(blocking=False)
        masters.advance(11)  # the masters' clock passes the ttl: the key is gone
        with pytest.raises(LockLost):
            lock.extend()


def test_no_lock_while_a_majority_is_stopped(redis_servers):
    servers = redis_servers(3)  # real redis-servers, killed when the test ends
    servers.stop(0)  # SIGSTOP: no answer until servers.resume(0)
    servers.stop(1)
    with Redlock(servers.urls, master_timeout=0.1, retry_count=1) as redlock:
        with pytest.raises(QuorumUnreachable):
            redlock.lock("report", ttl=10).acquire(blocking=False)
        servers.resume(0)
        assert redlock.lock("report", ttl=10).acquire(blocking=False)


def test_the_async_api_on_the_same_servers(redis_servers):
    servers = redis_servers(3)

    async def main():
        async with AsyncRedlock(servers.urls) as redlock, redlock.lock("report", ttl=10) as lock:
            assert lock.held

    asyncio.run(main())
