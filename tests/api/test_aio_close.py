"""AsyncRedlock.aclose() with rounds in flight leaves nothing behind: no key on any master, no task
of the library's still running, no connection open, and no thread (none is ever started by the
async API).  On both engines, on asyncio and uvloop.

What is in flight when aclose() is called, in one loop iteration:
* HOLDERS tasks holding their own names (half of them with auto_renew: renewal tasks run);
* CONTENDERS tasks in blocking acquires of one name that a holder has: their rounds and pauses
  between attempts are under way;
* BURST acquire(blocking=False) calls of fresh names begun in the same loop iteration as the
  aclose() call: their batch is queued, not yet sent, and wins after aclose() began (those
  acquires unlock what they won and raise).
"""

from __future__ import annotations

import asyncio
import threading

import pytest
from aio_support import run_async  # noqa: F401  (the fixture)
from support import assert_no_key, urls, wait_until

from hiredlock import HiredlockError
from hiredlock.aio import AsyncRedlock

HOLDERS = 20
CONTENDERS = 30
BURST = 40
TTL = 30.0  # long: a key left behind is seen, not hidden by its expiry


@pytest.mark.parametrize("last_master", ["running", "stopped"])
def test_aclose_with_rounds_in_flight(engine, masters5, key, run_async, last_master):  # noqa: F811
    """last_master "stopped": the fifth master is SIGSTOPped once the holders hold, so that the
    contenders', the burst's and aclose()'s own rounds wait for it (up to master_timeout) while
    aclose() runs; it is resumed afterwards (what it then runs of its buffer is its own: see
    README "Closing")."""
    threads_before = threading.active_count()
    clients_before = [len(srv.foreign_clients()) for srv in masters5]
    held_names = [f"{key}:held:{i}" for i in range(HOLDERS)]
    burst_names = [f"{key}:burst:{i}" for i in range(BURST)]
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
    assert out["burst_held"] == [False] * BURST
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
