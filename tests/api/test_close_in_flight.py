"""close() and aclose() settle what is in flight: an acquire running when the client closes either
returns before close() does (and close() releases what it won) or unlocks what it won and raises;
when close() returns no key of ours is left on any master. A holder whose release races close()
gets no error, and close() logs nothing for a lock that was just released. Blocked waiters learn
of the close at once, not at their next attempt.

AsyncRedlock.aclose() with rounds in flight leaves nothing behind: no key on any master, no task
of the library's still running, no connection open, and no thread (none is ever started by the
async API).  On both engines, on asyncio and uvloop.  What is in flight when aclose() is called,
in one loop iteration:
* HOLDERS tasks holding their own names (half of them with auto_renew: renewal tasks run);
* CONTENDERS tasks in blocking acquires of one name that a holder has: their rounds and pauses
  between attempts are under way;
* ACLOSE_BURST acquire(blocking=False) calls of fresh names begun in the same loop iteration as
  the aclose() call: their batch is queued, not yet sent, and wins after aclose() began (those
  acquires unlock what they won and raise).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest
from aio_support import run_async  # noqa: F401  (the fixture)
from support import assert_no_key, kb, set_foreign, urls, wait_until
from test_interrupts import TTL, make_waiter  # TTL: 30 s, a key left behind is seen

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
            foreign += [f"hiredlock:permit:{p}:{{{name}}}" for p in range(2)]
        elif kind == "read":
            foreign.append(f"hiredlock:rw:w:{{{name}}}")
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


# -- aclose() with rounds in flight ----------------------------------------------------------------


HOLDERS = 20
CONTENDERS = 30
ACLOSE_BURST = 40


@pytest.mark.parametrize("last_master", ["running", "stopped"])
def test_aclose_with_rounds_in_flight(engine, masters5, key, run_async, last_master):  # noqa: F811
    """last_master "stopped": the fifth master is SIGSTOPped once the holders hold, so that the
    contenders', the burst's and aclose()'s own rounds wait for it (up to master_timeout) while
    aclose() runs; it is resumed afterwards (what it then runs of its buffer is its own: see
    README "Closing")."""
    threads_before = threading.active_count()
    clients_before = [len(srv.foreign_clients()) for srv in masters5]
    held_names = [f"{key}:held:{i}" for i in range(HOLDERS)]
    burst_names = [f"{key}:burst:{i}" for i in range(ACLOSE_BURST)]
    contended = held_names[0]

    async def main() -> dict:
        me = asyncio.current_task()
        rl = AsyncRedlock(urls(masters5), backend=engine, master_timeout=0.2, retry_delay=0.01)
        holders_in = asyncio.Event()
        holding = []
        finish = asyncio.Event()  # never set before aclose(): the holders are still holding

        async def hold(i: int, name: str) -> bool:
            lock = rl.lock(name, TTL, auto_renew=i % 2 == 0)
            assert await lock.acquire(blocking=False)
            holding.append(lock)
            if len(holding) == HOLDERS:
                holders_in.set()
            await finish.wait()
            return lock.held

        async def contend() -> object:
            lock = rl.lock(contended, TTL)
            try:
                return await lock.acquire(blocking=True)
            except HiredlockError as exc:  # the client was closed under the acquire
                return exc

        holder_tasks = [asyncio.create_task(hold(i, n)) for i, n in enumerate(held_names)]
        await holders_in.wait()
        opened = [len(srv.foreign_clients()) for srv in masters5]
        if last_master == "stopped":
            masters5[-1].stop()
        contender_tasks = [asyncio.create_task(contend()) for _ in range(CONTENDERS)]
        await asyncio.sleep(0)  # the contenders' first attempts are queued ...
        await asyncio.sleep(0)  # ... and sent
        burst = [rl.lock(name, TTL) for name in burst_names]
        burst_tasks = [asyncio.create_task(lock.acquire(blocking=False)) for lock in burst]
        await asyncio.sleep(0)  # the burst's requests are queued, their batch not yet flushed
        await rl.aclose()
        finish.set()
        ours = {me, *holder_tasks, *contender_tasks, *burst_tasks}
        outcomes = await asyncio.gather(
            *holder_tasks, *contender_tasks, *burst_tasks, return_exceptions=True
        )
        return {
            "library_tasks": [t for t in asyncio.all_tasks() if t not in ours],
            "threads_inside": threading.active_count(),
            "opened": opened,
            "holders_held": outcomes[:HOLDERS],
            "contenders": outcomes[HOLDERS : HOLDERS + CONTENDERS],
            "burst": outcomes[HOLDERS + CONTENDERS :],
            "burst_held": [lock.held for lock in burst],
            "holding_held": [lock.held for lock in holding],
            "closed": rl.closed,
        }

    try:
        out = run_async(main())
    finally:
        if masters5[-1].stopped:
            masters5[-1].cont()  # returns once it has run everything it had buffered
    assert out["closed"] is True
    assert not out["library_tasks"], f"tasks left running after aclose(): {out['library_tasks']}"
    assert out["threads_inside"] == threads_before, "the async API started a thread"
    assert threading.active_count() == threads_before
    # The check below is meaningful: the client had connections open on every master.
    assert all(n > b for n, b in zip(out["opened"], clients_before)), out["opened"]
    # aclose() released every lock still held: the holders', and any burst acquire that won.
    assert out["holders_held"] == [False] * HOLDERS
    assert out["holding_held"] == [False] * HOLDERS
    assert out["burst_held"] == [False] * ACLOSE_BURST
    # The burst was queued when aclose() began, and went out (and won) while it closed: what
    # it won was unlocked, and those acquires raised.
    assert all(r is False or isinstance(r, HiredlockError) for r in out["burst"]), out["burst"]
    assert any(isinstance(r, HiredlockError) for r in out["burst"]), out["burst"]
    # Contenders: refused with a typed error once closed (or False/True as their attempt ended).
    odd = [r for r in out["contenders"] if not (isinstance(r, (bool, HiredlockError)))]
    assert not odd, f"contenders ended with something else than a typed outcome: {odd}"
    # A master stopped across aclose() finds the connection closed when it resumes, and drops
    # what it had not run yet once its replies cannot be delivered (README, "Closing"): on it a
    # key may stay until its ttl. Every master that answered while the client closed has none.
    running = masters5[:-1] if last_master == "stopped" else masters5
    for name in held_names + burst_names:
        assert_no_key(running, name, "after aclose()")
    for srv, before in zip(masters5, clients_before):
        wait_until(
            lambda srv=srv, before=before: len(srv.foreign_clients()) == before,
            2.0,
            f"the client's connections to {srv.port} closed (before: {before})",
        )


def test_close_waits_for_a_release_under_way_in_another_thread(engine, masters5, key):
    """A holder's release has let go of its lock (the lock is no longer one close() releases)
    and its round waits on a master that pauses writes for 300 ms: close() returns only once that
    round has ended, so no key of ours is left when it returns."""
    servers = masters5[:3]
    rl = Redlock(urls(servers), backend=engine, master_timeout=2.0)
    lock = rl.lock(f"{key}:held", TTL)
    assert lock.acquire(blocking=False)
    servers[0].admin().execute_command("CLIENT", "PAUSE", 300, "WRITE")
    releasing = threading.Thread(target=lock.release)
    releasing.start()
    wait_until(lambda: not lock.held, 5, "the release to let go of the lock")
    rl.close()
    left = keys_of(servers, key)
    releasing.join(10)
    assert not left, f"{len(left)} keys left when close() returned: {left}"
    assert not keys_of(servers, key), "keys left after the release ended"


def test_aclose_waits_for_a_release_under_way_in_another_task(engine, masters5, key, run_async):  # noqa: F811
    """The asyncio twin of the test above: a task's release has let go of its lock and waits on
    a master that pauses writes for 300 ms; aclose() returns only once that round has ended."""
    servers = masters5[:3]

    async def main() -> tuple:
        rl = AsyncRedlock(urls(servers), backend=engine, master_timeout=2.0)
        lock = rl.lock(f"{key}:held", TTL)
        assert await lock.acquire(blocking=False)
        servers[0].admin().execute_command("CLIENT", "PAUSE", 300, "WRITE")
        releasing = asyncio.ensure_future(lock.release())
        while lock.held:
            await asyncio.sleep(0)  # (the release lets go at its first step)
        await rl.aclose()
        left = keys_of(servers, key)
        await releasing
        return left

    left = run_async(main())
    assert not left, f"{len(left)} keys left when aclose() returned: {left}"
    assert not keys_of(servers, key), "keys left after the release ended"
