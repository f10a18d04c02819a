"""Scenarios that must come out the same on memory masters and on real redis-servers
(tests/testing/test_scenarios_memory_and_servers.py runs each on both).

Each scenario is f(make_redlock, servers, key): `servers` are five RedisServer objects or
memory masters dressed as them (tests/support/memory_servers.py), with stop/cont/kill/restart and
admin(); make_redlock(urls) builds a client on them (sync or async API).
"""

from __future__ import annotations

import pytest
from apis import rwlock
from support import urls, wait_until

from hiredlock import LockLost, NotHeld, QuorumUnreachable


def exclusion_and_handover(make_redlock, servers, key):
    first, second = make_redlock(urls(servers)), make_redlock(urls(servers))
    held = first.lock(key, 10)
    assert held.acquire(blocking=False)
    assert not second.lock(key, 10).acquire(blocking=False)
    held.release()
    with pytest.raises(NotHeld):
        held.release()
    taker = second.lock(key, 10)
    assert taker.acquire(blocking=False)
    assert all(s.admin().exists(key) == 1 for s in servers)
    taker.release()
    assert all(s.admin().exists(key) == 0 for s in servers)


def stopped_minority_then_majority(make_redlock, servers, key):
    rl = make_redlock(urls(servers), master_timeout=0.05)
    servers[0].stop()
    servers[1].stop()
    lock = rl.lock(key, 10)
    assert lock.acquire(blocking=False)
    lock.release()
    servers[2].stop()
    with pytest.raises(QuorumUnreachable):
        rl.lock(key, 10).acquire(blocking=False)
    for s in servers[:3]:
        s.cont()
    lock = rl.lock(key, 10)
    assert lock.acquire(blocking=False)
    lock.release()


def killed_masters_and_restarts(make_redlock, servers, key):
    rl = make_redlock(urls(servers))
    lock = rl.lock(key, 10)
    assert lock.acquire(blocking=False)
    servers[0].kill()
    servers[1].kill()
    lock.extend()
    servers[2].kill()
    with pytest.raises(LockLost):
        lock.extend()
    for s in servers[:3]:
        s.restart()
        assert s.admin().exists(key) == 0


def expiry_loses_the_lock(make_redlock, servers, key):
    rl = make_redlock(urls(servers))
    lock = rl.lock(key, 0.2)
    assert lock.acquire(blocking=False)
    wait_until(lambda: all(s.admin().exists(key) == 0 for s in servers), 5, "keys expired")
    with pytest.raises(LockLost):
        lock.extend()
    again = rl.lock(key, 10)
    assert again.acquire(blocking=False)
    again.release()


def semaphore_and_rwlock(make_redlock, servers, key):
    rl = make_redlock(urls(servers))
    semaphore = rl.semaphore(key, 2, 10)
    first, second = semaphore.acquire(blocking=False), semaphore.acquire(blocking=False)
    assert first is not None and second is not None
    assert semaphore.acquire(blocking=False) is None
    first.release()
    third = semaphore.acquire(blocking=False)
    assert third is not None
    for permit in (second, third):
        permit.release()
    rw = rwlock(rl, key + ":rw", 10)
    readers = [rw.read() for _ in range(2)]
    assert all(reader.acquire(blocking=False) for reader in readers)
    assert not rw.write().acquire(blocking=False)
    for reader in readers:
        reader.release()
    writer = rw.write()
    assert writer.acquire(blocking=False)
    writer.release()


def fences_increase(make_redlock, servers, key):
    rl = make_redlock(urls(servers))
    fences = []
    for _ in range(3):
        lock = rl.lock(key, 10, fencing=True)
        assert lock.acquire(blocking=False)
        fences.append(lock.fence)
        lock.release()
    assert fences[0] < fences[1] < fences[2], fences


SCENARIOS = [
    exclusion_and_handover,
    stopped_minority_then_majority,
    killed_masters_and_restarts,
    expiry_loses_the_lock,
    semaphore_and_rwlock,
    fences_increase,
]
