"""Every lock kind taken, extended and released on one name, for the tests of the key layout
and of namespaces (tests/kinds/test_key_layout.py, test_namespace.py)."""

from __future__ import annotations

from apis import rwlock

from hiredlock._core.slots import hash_tag


def exercise_every_kind(rl, name, ttl: float = 10) -> None:
    """Takes, extends and releases `name` as every kind of lock (and a multilock of two names
    sharing its tag, and a batch), inspects it, force-releases it and deletes its fence
    counter: each step must succeed."""
    lock = rl.lock(name, ttl)
    assert lock.acquire(blocking=False), lock.last_votes
    lock.extend(ttl)
    lock.release()

    fenced = rl.lock(name, ttl, fencing=True)
    assert fenced.acquire(blocking=False), fenced.last_votes
    assert fenced.fence is not None and fenced.fence > 0
    first = fenced.fence
    fenced.release()
    assert fenced.acquire(blocking=False), fenced.last_votes
    assert fenced.fence > first, (first, fenced.fence)
    fenced.release()

    fair = rl.lock(name, ttl, fair=True)
    assert fair.acquire(blocking=False), fair.last_votes
    fair.extend(ttl)
    fair.release()

    rw = rwlock(rl, name, ttl)
    reader = rw.read()
    assert reader.acquire(blocking=False), reader.last_votes
    reader.extend(ttl)
    writer = rw.write()
    assert not writer.acquire(blocking=False)  # (a reader inside: refused, not an error)
    reader.release()
    assert writer.acquire(blocking=False), writer.last_votes
    writer.extend(ttl)
    writer.release()

    semaphore = rl.semaphore(name, 2, ttl)
    permits = [semaphore.acquire(blocking=False) for _ in range(2)]
    assert all(permits), [p and p.last_votes for p in permits]
    assert semaphore.acquire(blocking=False) is None  # (full: refused, not an error)
    permits[0].extend(ttl)
    for permit in permits:
        permit.release()

    rlock = rl.rlock(name, ttl)
    assert rlock.acquire(blocking=False) and rlock.acquire(blocking=False)
    rlock.release()
    rlock.release()

    text = name if isinstance(name, str) else name.decode("latin-1")
    tag = hash_tag(text.encode()).decode("latin-1")
    multi = rl.multilock([f"{{{tag}}}one", f"{{{tag}}}two"], ttl)
    assert multi.acquire(blocking=False), multi.last_votes
    multi.extend(ttl)
    multi.release()

    batch = rl.acquire_many([name, f"{text}:other"], ttl)
    assert all(batch), batch
    rl.release_many(batch)

    states = rl.inspect(name)
    assert {state.outcome.name for state in states} == {"OK"}, states
    assert not any(state.exists for state in states)
    removed = rl.force_release(name)
    assert {entry.outcome.name for entry in removed} == {"OK"}, removed
    rl.delete_fence_counter(name)
