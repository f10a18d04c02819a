"""Fair locks: Redlock.lock(name, ttl, fair=True) gives a FairLock (hiredlock.aio: an
AsyncFairLock), a lock on the name's own key with a queue in front of it on each master
(`hiredlock:fair:q:<name>`, the waiters by their order, and `hiredlock:fair:e:<name>`, when each
waiter's place runs out). Blocking acquires made >= 10 ms apart are granted in the order they
were made; a waiter keeps its place for the waiting window past its last attempt; a call that
gives up leaves at once.

On both engines and both APIs (support/apis.py's facade: each thread calling a lock's acquire()
on the async API is served by a task of its own, so "a waiter" is a thread on the sync API and a
task on the async one). Where a test needs to know the order of the waiters, it starts the next
one only after the previous one's first attempt has reached every master (the queue's ZCARD
grew), then waits 15-20 ms: the README promises the order of calls made >= 10 ms apart, and
the spacing is the point there, not a stand-in for synchronisation.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Optional

import pytest
from apis import make_redlock_fixture, pytest_generate_tests, timed  # noqa: F401  (both APIs)
from features_support import lock_keys, script_calls
from support import (
    EXTRA_SLACK,
    assert_values,
    braced,
    kb,
    open_connections,
    urls,
    values,
    wait_until,
)

import hiredlock
import hiredlock.aio
from hiredlock import LockNotAcquired, Outcome, QuorumUnreachable

RD = 0.05  # retry_delay of the tests whose subject is not the timer
MT = 0.05  # master_timeout: the window is 3 * retry_delay + 2 * MT (at least 100 ms)
SLACK = 1.0 + EXTRA_SLACK  # added to upper time bounds (a loaded 2-core CI machine)
JOIN = 30.0  # how long a waiter may take before the test calls it hung


def window_s(retry_delay: float, master_timeout: float) -> float:
    """The waiting window (README "Fair lock"): how long a waiter's place outlives its last
    attempt."""
    return max(0.1, 3 * retry_delay + 2 * master_timeout)


def queue_keys(key) -> tuple[bytes, bytes]:
    """The documented queue keys of a name: hiredlock:fair:q:{<name>} and :e:{<name>}."""
    k = braced(key)
    return b"hiredlock:fair:q:" + k, b"hiredlock:fair:e:" + k


def queues(servers, key) -> list[list[bytes]]:
    """Every master's queue of `key`, first in line first."""
    q = queue_keys(key)[0]
    return [s.admin().zrange(q, 0, -1) for s in servers]


def wait_queued(servers, key, n: int, timeout: float = 10.0) -> None:
    """Until every master's queue of `key` holds at least n waiters (the last one's attempt
    reached them all: its order, taken at that attempt, is known to be later than the others')."""
    q = queue_keys(key)[0]
    wait_until(
        lambda: all(s.admin().zcard(q) >= n for s in servers),
        timeout + EXTRA_SLACK,
        f"{n} waiter(s) in the queue of every master: {queues(servers, key)}",
    )


def assert_not_queued(servers, key, ticket: Optional[bytes] = None) -> None:
    """`ticket` (None: anybody) is in no master's queue nor expiries, checked once: the call
    that left has returned, and its leaving round waited for every master."""
    q, e = queue_keys(key)
    for s in servers:
        a = s.admin()
        if ticket is None:
            assert a.zcard(q) == 0 and a.zcard(e) == 0, (s.port, a.zrange(q, 0, -1))
        else:
            assert a.zscore(q, ticket) is None, f"port {s.port} still queues {ticket!r}"
            assert a.zscore(e, ticket) is None, f"port {s.port} still has {ticket!r}'s expiry"


def assert_nothing_left(servers, timeout: float) -> None:
    """No key of ours on any master (the lock, the queue, its expiries) within `timeout`: the
    queue's keys are deleted with its last waiter, or expire a window after it at the latest."""
    wait_until(
        lambda: not any(lock_keys(s) for s in servers),
        timeout + EXTRA_SLACK,
        "no key left on the masters",
    )


def add_dead_waiter(servers, key, order_us: int, expires_in_ms: float) -> bytes:
    """Queues a ticket by hand on every master, as a waiter that made its last attempt just now
    and then died would have left it: its order, and its expiry on each master's own clock."""
    ticket = b"dead-waiter-%s" % os.urandom(6).hex().encode()
    q, e = queue_keys(key)
    for s in servers:
        a = s.admin()
        seconds, micros = a.time()
        now_ms = seconds * 1000 + micros // 1000
        a.zadd(q, {ticket: order_us})
        a.zadd(e, {ticket: now_ms + int(expires_in_ms)})
    return ticket


def unwrap(obj: Any) -> Any:
    """The library object behind the async facade (the object itself on the sync API)."""
    return getattr(obj, "_target", obj)


class Waiter:
    """lock.acquire(**kwargs) in a thread of its own (a task of its own on the async API). When
    it gets the lock, on_grant(self) runs while it is held, then it is released."""

    def __init__(
        self, name: Any, lock: Any, on_grant: Optional[Callable] = None, **kwargs: Any
    ) -> None:
        self.name = name
        self.lock = lock
        self.on_grant = on_grant
        self.kwargs = kwargs
        self.result: Any = None
        self.error: Optional[BaseException] = None
        self.t_done: Optional[float] = None  # time.monotonic() when acquire() returned
        self.thread = threading.Thread(target=self._run, name=f"fair-waiter-{name}", daemon=True)

    def start(self) -> Waiter:
        self.thread.start()
        return self

    def _run(self) -> None:
        try:
            self.result = self.lock.acquire(**self.kwargs)
            self.t_done = time.monotonic()
            if self.result:
                if self.on_grant is not None:
                    self.on_grant(self)
                self.lock.release()
        except BaseException as exc:
            self.error = exc

    def join(self) -> Waiter:
        self.thread.join(JOIN)
        assert not self.thread.is_alive(), f"waiter {self.name} hung in acquire()"
        if self.error is not None:
            raise self.error
        return self


def grant_order(holder_client, clients, servers, key, n: int) -> tuple[list, list[Waiter]]:
    """A fair holder holds `key`; n waiters (on `clients` in turn) ask for it one after another,
    each once the previous one is in every master's queue and 15-20 ms later; the holder then
    releases. Returns the waiters in the order they got the lock (each releases at once), and
    the waiters."""
    holder = holder_client.lock(key, 30, fair=True)
    assert holder.acquire(blocking=False), "a free name was refused to an uncontended fair lock"
    grants: list = []
    waiters: list[Waiter] = []
    try:
        for i in range(n):
            lock = clients[i % len(clients)].lock(key, 30, fair=True)
            # (held exclusively: the list's order is the grant order)
            waiters.append(Waiter(i, lock, lambda w: grants.append(w.name), timeout=JOIN).start())
            wait_queued(servers, key, i + 1)
            time.sleep(random.uniform(0.015, 0.02))  # the next call is made >= 10 ms later
        assert holder.held, "the holder lost the lock while the waiters queued"
    finally:
        holder.release()
        for w in waiters:
            w.join()
    return grants, waiters


# -- 1. grant order equals request order -----------------------------------------------------------


@pytest.mark.parametrize("wake", [True, False], ids=["woken", "timer"])
def test_granted_in_the_order_asked(api, make_redlock, masters5, key, wake):
    """8 waiters on 3 clients, asked >= 15 ms apart while the lock is held: after the release
    they get it one by one in exactly that order, whether woken by release notices or by their
    timers only (the queue decides, not who tries first)."""
    rd = 0.1  # the timer's handoffs take ~rd each; the window (400 ms) outlasts its pauses
    clients = [
        make_redlock(urls(masters5), retry_delay=rd, master_timeout=MT, wake=wake) for _ in range(3)
    ]
    for rl in clients:
        open_connections(rl)  # every first attempt reaches all five masters
    grants, waiters = grant_order(clients[0], clients, masters5, key, 8)
    assert all(w.result is True for w in waiters), [(w.name, w.result) for w in waiters]
    assert grants == list(range(8)), f"granted in the order {grants}, asked in 0..7"
    assert_nothing_left(masters5, window_s(rd, MT))


# -- 2. uncontended --------------------------------------------------------------------------------


def test_uncontended_is_one_round_trip_and_leaves_nothing(api, make_redlock, masters5, key):
    """A fair lock on a free name is taken with blocking=False in one round trip (one script
    per master) and released in one more; it is the name's own key, and nothing of the queue
    remains once it is released."""
    rl = make_redlock(urls(masters5), retry_delay=RD, master_timeout=MT)
    open_connections(rl)
    lock = rl.lock(key, 30, fair=True)
    if api == "sync":
        assert type(lock) is hiredlock.FairLock and isinstance(lock, hiredlock.Lock)
    else:
        assert type(unwrap(lock)) is hiredlock.aio.AsyncFairLock
        assert isinstance(unwrap(lock), hiredlock.aio.AsyncLock)
    # Loads the acquire and release scripts (a first EVALSHA meets NOSCRIPT and is sent again as
    # EVAL): the counts below are of one acquire and one release only.
    warm = rl.lock(key + ":warm", 30, fair=True)
    assert warm.acquire(blocking=False)
    warm.release()
    assert_nothing_left(masters5, window_s(RD, MT))

    def scripts_since(before):
        now = script_calls(masters5)
        return [now[s.port] - before[s.port] for s in masters5]

    before = script_calls(masters5)
    assert lock.acquire(blocking=False), "a free name was refused"
    # (the round ends on a quorum: the last masters' scripts may still be on their way)
    wait_until(lambda: min(scripts_since(before)) >= 1, 5, "the acquire on every master")
    assert scripts_since(before) == [1] * 5, "an uncontended fair acquire took more than a round"
    assert lock.held and 0 < lock.validity <= 30
    assert_values(masters5, kb(key), lock.token)  # the name's own key, as a Lock's

    before = script_calls(masters5)
    lock.release()
    assert not lock.held
    wait_until(lambda: min(scripts_since(before)) >= 1, 5, "the release on every master")
    assert scripts_since(before) == [1] * 5, "a fair release took more than a round"
    assert_nothing_left(masters5, window_s(RD, MT))
    # and the object can be taken again
    with lock:
        assert lock.held
    assert_nothing_left(masters5, window_s(RD, MT))


# -- 3. a waiter that gives up ---------------------------------------------------------------------


class Interrupt(Exception):
    pass


@pytest.mark.parametrize("how", ["timeout", "non-blocking", "interrupt"])
def test_a_waiter_that_gives_up_leaves_the_queue_at_once(api, make_redlock, masters5, key, how):
    """The quitter is ahead of `nxt` in the queue and gives up (its deadline, blocking=False,
    a signal handler's exception on the sync API / task.cancel() on the async one): right after
    acquire() returns or raises, its ticket is on no master, and `nxt` gets the lock as soon as
    the holder releases it, not a window later (retry_delay 0.2 s: a window of 0.7 s)."""
    rd = 0.2
    window = window_s(rd, MT)
    holder_rl, quitter_rl, next_rl = (
        make_redlock(urls(masters5), retry_delay=rd, master_timeout=MT) for _ in range(3)
    )
    for rl in (holder_rl, quitter_rl, next_rl):
        open_connections(rl)
    # (a plain lock holds the name: a fair holder's ticket stays queued while its key lives, a
    # window at most, and the queue below is the waiters' only)
    holder = holder_rl.lock(key, 30)
    assert holder.acquire(blocking=False)
    quitter = quitter_rl.lock(key, 30, fair=True)
    nxt = Waiter("next", next_rl.lock(key, 30, fair=True), timeout=JOIN)
    ticket: list[bytes] = []

    def quitter_queued_then_next():
        wait_queued(masters5, key, 1)
        ticket.extend({t for queue in queues(masters5, key) for t in queue})
        assert len(ticket) == 1, ticket
        time.sleep(random.uniform(0.015, 0.02))  # the next call is made >= 10 ms later
        nxt.start()
        wait_queued(masters5, key, 2)
        assert all(queue[0] == ticket[0] for queue in queues(masters5, key)), "not first"

    if how == "timeout":
        quitter_waiter = Waiter("quitter", quitter, timeout=0.6).start()
        quitter_queued_then_next()
        assert quitter_waiter.join().result is False, "the quitter got a held lock"
        assert_not_queued(masters5, key, ticket[0])
    elif how == "non-blocking":
        # (one attempt, queued and then refused: it would be ahead of nxt, had it stayed)
        assert quitter.acquire(blocking=False) is False
        assert_not_queued(masters5, key)
        nxt.start()
        wait_queued(masters5, key, 1)
    elif api == "sync":
        errors: list[BaseException] = []

        def interrupt_when_queued():
            try:
                quitter_queued_then_next()
            except BaseException as exc:
                errors.append(exc)
            finally:
                os.kill(os.getpid(), signal.SIGUSR1)

        def raise_interrupt(signum, frame):
            raise Interrupt

        previous = signal.signal(signal.SIGUSR1, raise_interrupt)
        helper = threading.Thread(target=interrupt_when_queued)
        try:
            helper.start()
            with pytest.raises(Interrupt):
                quitter.acquire(timeout=JOIN)
        finally:
            helper.join(JOIN)
            signal.signal(signal.SIGUSR1, previous)
        assert not errors, errors
        assert_not_queued(masters5, key, ticket[0])
    else:
        target = unwrap(quitter)

        async def cancel_when_queued():
            task = asyncio.ensure_future(target.acquire(timeout=JOIN))
            await asyncio.to_thread(quitter_queued_then_next)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                return "cancelled"
            return task.result()

        assert make_redlock.runner.call(cancel_when_queued) == "cancelled"
        assert_not_queued(masters5, key, ticket[0])

    assert not quitter.held
    t_release = time.monotonic()
    holder.release()
    assert nxt.join().result is True
    waited = nxt.t_done - t_release
    assert waited < window / 2 + EXTRA_SLACK, f"the next waiter was held back {waited:.3f} s"
    assert_nothing_left(masters5, window)


# -- 4. a waiter that died -------------------------------------------------------------------------


def test_a_dead_waiter_holds_the_queue_back_one_window_at_most(api, make_redlock, masters5, key):
    """A waiter that died right after an attempt (its ticket, put on every master by hand, with
    an expiry one window ahead) is ahead of the live waiter: the live one gets the lock only once
    that place ran out on a quorum, and within one window of the holder's release (plus slack)."""
    rd = 0.1
    window = window_s(rd, MT)
    holder_rl, rl = (make_redlock(urls(masters5), retry_delay=rd, master_timeout=MT) for _ in "ab")
    for client in (holder_rl, rl):
        open_connections(client)
    holder = holder_rl.lock(key, 30, fair=True)
    assert holder.acquire(blocking=False)
    t_dead = time.monotonic()  # (the masters' clocks read after this: its place ends later)
    dead = add_dead_waiter(masters5, key, time.time_ns() // 1000 - 1_000_000, window * 1000)
    live = Waiter("live", rl.lock(key, 30, fair=True), timeout=JOIN).start()
    wait_queued(masters5, key, 2)
    assert all(queue[0] == dead for queue in queues(masters5, key))
    t_release = time.monotonic()
    holder.release()
    assert live.join().result is True
    assert live.t_done >= t_dead + window - 0.02, (
        f"the live waiter went ahead of an earlier waiter still in its window: "
        f"{live.t_done - t_dead:.3f} s after it was queued, window {window} s"
    )
    assert live.t_done - t_release <= window + SLACK, live.t_done - t_release
    # (a master that had not yet forgotten the dead ticket when the quorum took the lock keeps
    # it, ran out, until its queue expires: within the window)
    assert_nothing_left(masters5, window)


KILLED_WAITER = """
import sys
import hiredlock
engine, name, rd, mt, *masters = sys.argv[1:]
rl = hiredlock.Redlock(masters, backend=engine, retry_delay=float(rd), master_timeout=float(mt))
rl.inspect("warm")  # every master's connection open: the first attempt reaches them all
print("acquired" if rl.lock(name, 30, fair=True).acquire(timeout=60) else "gave up", flush=True)
"""


@pytest.mark.subprocess
def test_a_killed_waiter_holds_the_queue_back_one_window_at_most(
    api, engine, make_redlock, masters5, key
):
    """A process SIGKILLed while it waits (first in line): the live waiter behind it gets the
    lock once the dead one's place ran out on a quorum of masters (read from the masters just
    before the kill), and within one window of the kill (plus slack)."""
    rd = 0.1
    window = window_s(rd, MT)
    holder_rl, rl = (make_redlock(urls(masters5), retry_delay=rd, master_timeout=MT) for _ in "ab")
    for client in (holder_rl, rl):
        open_connections(client)
    holder = holder_rl.lock(key, 30)  # (plain: the queue below is the waiters' only)
    assert holder.acquire(blocking=False)
    env = {k: v for k, v in os.environ.items() if k != "HIREDLOCK_IMPL"}
    args = [sys.executable, "-c", KILLED_WAITER, engine, key, str(rd), str(MT), *urls(masters5)]
    child = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    live = None
    try:
        wait_queued(masters5, key, 1, timeout=30)  # (the child's interpreter starts first)
        (dead,) = {t for queue in queues(masters5, key) for t in queue}
        time.sleep(random.uniform(0.015, 0.02))  # the live call is made >= 10 ms later
        live = Waiter("live", rl.lock(key, 30, fair=True), timeout=JOIN).start()
        wait_queued(masters5, key, 2)
        # When the dead one's place ends at the earliest, per master: it can only be renewed.
        e = queue_keys(key)[1]
        t_read = time.monotonic()
        left_ms = []
        for s in masters5:
            a = s.admin()
            seconds, micros = a.time()
            left_ms.append(a.zscore(e, dead) - (seconds * 1000 + micros // 1000))
        child.kill()
        child.wait(10)
        t_kill = time.monotonic()
        assert child.returncode == -signal.SIGKILL
        assert all(queue[0] == dead for queue in queues(masters5, key)), "not first in line"
        holder.release()
        assert live.join().result is True
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        out = child.stdout.read().decode()
        child.stdout.close()
        child.stderr.close()
        if live is not None:
            live.thread.join(JOIN)
    assert "acquired" not in out, "the child got a held lock"
    free_at = t_read + sorted(left_ms)[2] / 1000  # the third master to forget it (a quorum)
    assert live.t_done >= free_at - 0.02, (
        f"the live waiter went {free_at - live.t_done:.3f} s before the dead one's place ran out"
    )
    assert live.t_done - t_kill <= window + SLACK, live.t_done - t_kill
    assert_nothing_left(masters5, window)


@pytest.mark.parametrize(
    "wake",
    [
        pytest.param(True, id="woken"),
        pytest.param(False, id="timer"),
    ],
)
def test_a_waiter_behind_a_stalled_head_does_not_spin(api, make_redlock, masters5, key, wake):
    """The lock is free but the first in line is a dead waiter whose place lasts 0.5 s: the live
    waiter behind it waits for its timer (0.5 to 1.5 x retry_delay between attempts, two
    scripts per attempt and master), not in a loop of attempts."""
    rl = make_redlock(urls(masters5), retry_delay=RD, master_timeout=MT, wake=wake)
    open_connections(rl)
    add_dead_waiter(masters5, key, time.time_ns() // 1000 - 1_000_000, 500)
    lock = rl.lock(key, 30, fair=True)
    before = script_calls(masters5)
    t0 = time.monotonic()
    assert lock.acquire(timeout=JOIN)
    elapsed = time.monotonic() - t0
    calls = max(script_calls(masters5)[s.port] - before[s.port] for s in masters5)
    lock.release()
    attempts = elapsed / (0.5 * RD) + 3  # the timer's most, and the first and last attempts
    assert calls <= 2 * attempts, f"{calls} scripts on a master in {elapsed:.3f} s"


# -- a holder that never releases -----------------------------------------------------------------


def test_a_holder_that_never_releases_hands_over_when_its_key_expires(
    api, make_redlock, masters5, key
):
    """A fair holder (ttl 0.3 s, no renewal) never releases; a waiter asks while the key is
    held. The waiter is told when the holder's key expires and tries then: it gets the lock
    within the ttl and 2 x retry_delay of the holder's acquire (that try, and room for one more
    after a round that failed on a loaded machine), after the holder's validity ran out (never
    two holders), and not a waiting window later (3 x retry_delay + 2 master timeouts past the
    holder's attempt: 1 s here), as if the holder were still first in line. (retry_delay 0.3 s:
    the bound, 0.9 s, stays below that window with the room a loaded machine needs.)"""
    rd = 0.3
    holder_rl, rl = (make_redlock(urls(masters5), retry_delay=rd, master_timeout=MT) for _ in "ab")
    for client in (holder_rl, rl):
        open_connections(client)
    holder = holder_rl.lock(key, 0.3, fair=True)
    acquired, t_holder, _t1 = timed(holder.acquire, blocking=False)
    assert acquired, "a free name was refused to an uncontended fair lock"
    holder_held_at_grant: list[bool] = []
    waiter = Waiter(
        "next",
        rl.lock(key, 0.3, fair=True),
        lambda w: holder_held_at_grant.append(holder.held),
        timeout=JOIN,
    ).start()
    asked = time.monotonic() - t_holder
    assert asked < holder.ttl / 2, f"the waiter asked {asked:.3f} s after the holder acquired"
    assert waiter.join().result is True
    assert holder_held_at_grant == [False], "the waiter got the lock while the holder held it"
    handover = waiter.t_done - t_holder
    bound = holder.ttl + 2 * rd + EXTRA_SLACK
    assert holder.ttl + 2 * rd < window_s(rd, MT)  # (the test tells the two apart)
    assert handover <= bound, (
        f"the waiter got the lock {handover:.3f} s after the holder (ttl {holder.ttl} s, "
        f"retry_delay {rd} s: bound {bound:.3f} s)"
    )


def test_a_minority_win_gets_its_whole_place_back(api, make_redlock, masters5, key):
    """A holder known on 3 of the 5 masters (set by hand); X (ttl 0.2 s, retry_delay 2 s,
    wake=False: a 6.1 s window, and its next attempt 1 s later at the earliest) takes the lock
    on the 2 free masters only, fails and unlocks. Where it took the lock its place had been
    cut to the key's life; its unlock gives the window back: past X's ttl, X is still queued
    on every master for most of its window, and Y, asking after it, is first on none of them."""
    rd, ttl = 2.0, 0.2
    window = window_s(rd, MT)
    x_rl = make_redlock(urls(masters5), retry_delay=rd, master_timeout=MT, wake=False)
    y_rl = make_redlock(urls(masters5), master_timeout=MT)
    for rl in (x_rl, y_rl):
        open_connections(rl)
    for m in masters5[2:]:
        m.admin().set(key, b"holder", px=10_000)
    q, e = queue_keys(key)
    x = Waiter("x", x_rl.lock(key, ttl, fair=True), timeout=JOIN)
    y = y_rl.lock(key, ttl, fair=True)
    x.start()
    try:
        wait_queued(masters5[2:], key, 1)
        (ticket,) = {t for queue in queues(masters5[2:], key) for t in queue}
        # (X's unlock deleted its keys on the 2 free masters)
        wait_until(lambda: not any(m.admin().exists(key) for m in masters5[:2]), 5, "X's unlock")
        left_ms = []
        for m in masters5:
            a = m.admin()
            seconds, micros = a.time()
            score = a.zscore(e, ticket)
            left_ms.append(None if score is None else score - (seconds * 1000 + micros // 1000))
        time.sleep(ttl + 0.05)  # past the key X took (the place that was cut to it)
        queued = [m.admin().zscore(q, ticket) is not None for m in masters5]
        y_got = y.acquire(blocking=False)
        y_won = [str(v) for v in y.last_votes if v.outcome == Outcome.OK]
    finally:
        for m in masters5[2:]:
            m.admin().delete(key)
        x.join()
    assert x.result is True
    assert all(left is not None and left > window * 1000 - 1000 for left in left_ms), (
        f"X's place on each master (ms left; window {window * 1000:.0f} ms): {left_ms}"
    )
    assert queued == [True] * 5, f"X, waiting, is queued on {queued} (per master)"
    assert y_got is False and not y_won, f"Y, asking after X, took the lock on {y_won}"


# -- 5. exclusion ----------------------------------------------------------------------------------


def test_exclusion_six_fair_waiters_fifteen_cycles(api, make_redlock, masters5, key):
    """6 waiters on 3 clients, 15 acquire/release cycles each: an occupancy count (in-process,
    where every holder is) never sees two holders, each holder's token is on a quorum while it
    holds, every cycle completes, and nothing is left on the masters."""
    clients = [make_redlock(urls(masters5), retry_delay=RD, master_timeout=MT) for _ in range(3)]
    for rl in clients:
        open_connections(rl)
    cycles, n = 15, 6
    mutex = threading.Lock()
    occupancy = {"now": 0, "max": 0}
    done = [0] * n
    bad: list[str] = []
    start = threading.Barrier(n, timeout=JOIN)

    def worker(i, lock):
        start.wait()
        for cycle in range(cycles):
            assert lock.acquire(timeout=JOIN), f"waiter {i} cycle {cycle}: not acquired"
            with mutex:
                occupancy["now"] += 1
                occupancy["max"] = max(occupancy["max"], occupancy["now"])
            token = lock.token.encode()
            held_on = sum(v == token for v in values(masters5, key))
            if held_on < 3:
                bad.append(f"waiter {i} cycle {cycle}: token on {held_on} masters")
            with mutex:
                occupancy["now"] -= 1
            done[i] += 1
            lock.release()

    errors: list[BaseException] = []

    def run(i, lock):
        try:
            worker(i, lock)
        except BaseException as exc:
            errors.append(exc)
            start.abort()

    locks = [clients[i % 3].lock(key, 10, fair=True) for i in range(n)]
    threads = [threading.Thread(target=run, args=(i, locks[i])) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a waiter hung"
    assert not errors, errors
    assert occupancy["max"] == 1, f"{occupancy['max']} holders at once"
    assert not bad, bad
    assert done == [cycles] * n, done
    assert_nothing_left(masters5, window_s(RD, MT))


# -- 6. a fair lock and a plain lock on one name ---------------------------------------------------


def test_fair_and_plain_locks_exclude_each_other(api, make_redlock, masters5, key):
    """One key: a held FairLock refuses a plain Lock and `locked(name)` sees it; a held plain
    Lock refuses a FairLock, and its release (announced on the same channel) wakes a fair
    waiter at once (retry_delay 2 s: its timer would take 1 s at least)."""
    fair_rl, plain_rl = (
        make_redlock(urls(masters5), retry_delay=2, master_timeout=MT) for _ in "ab"
    )
    for rl in (fair_rl, plain_rl):
        open_connections(rl)
    fair = fair_rl.lock(key, 30, fair=True)
    plain = plain_rl.lock(key, 30)
    assert fair.acquire(blocking=False)
    assert plain_rl.locked(key) and fair_rl.locked(key)
    assert plain.acquire(blocking=False) is False, "a plain lock got a held fair lock's name"
    assert sum(vote.outcome == Outcome.TAKEN for vote in plain.last_votes) >= 3, plain.last_votes
    fair.release()
    assert not plain_rl.locked(key)

    assert plain.acquire(blocking=False)
    assert fair_rl.locked(key)
    assert fair.acquire(blocking=False) is False, "a fair lock got a held plain lock's name"
    assert_not_queued(masters5, key)
    waiter = Waiter("fair", fair, timeout=JOIN).start()
    wait_queued(masters5, key, 1)
    t_release = time.monotonic()
    plain.release()
    assert waiter.join().result is True
    assert waiter.t_done - t_release < 0.5 + EXTRA_SLACK, waiter.t_done - t_release
    assert not fair_rl.locked(key)
    assert_nothing_left(masters5, window_s(2, MT))


# -- 7. quorum -------------------------------------------------------------------------------------


def test_two_masters_down_in_order_three_down_unreachable(api, make_redlock, masters5, key):
    """With 2 of 5 masters killed the fair lock still works and still grants in the order asked
    (the 3 left are a quorum and their queues agree); with 3 killed, acquire raises
    QuorumUnreachable (at once with blocking=False, after the retries otherwise), and the call
    leaves the survivors' queues on its way out."""
    rd = 0.1
    clients = [make_redlock(urls(masters5), retry_delay=rd, master_timeout=MT) for _ in range(2)]
    for rl in clients:
        open_connections(rl)
    masters5[3].kill()
    masters5[4].kill()
    live = masters5[:3]
    grants, waiters = grant_order(clients[0], clients, live, key, 5)
    assert all(w.result is True for w in waiters)
    assert grants == list(range(5)), f"granted in the order {grants}, asked in 0..4"
    assert_nothing_left(live, window_s(rd, MT))

    masters5[2].kill()
    lock = clients[1].lock(key, 30, fair=True)
    with pytest.raises(QuorumUnreachable) as caught:
        lock.acquire(blocking=False)
    failed = (Outcome.CONN_ERROR, Outcome.TIMEOUT)
    assert sum(vote.outcome in failed for vote in caught.value.votes) >= 3, caught.value.votes
    assert isinstance(caught.value, LockNotAcquired)
    assert_not_queued(masters5[:2], key)
    with pytest.raises(QuorumUnreachable):
        lock.acquire(timeout=10)
    assert not lock.held
    assert_not_queued(masters5[:2], key)
    assert_nothing_left(masters5[:2], window_s(rd, MT))


# -- 8. bad input, before any I/O ------------------------------------------------------------------


@pytest.mark.parametrize("fair", ["yes", 1, 0, None, "True"])
def test_fair_must_be_a_bool(api, make_redlock, canary, key, fair):
    """`fair` is a flag like `fencing` or `auto_renew`: anything but a bool is a TypeError naming
    it, raised by lock() before any connection."""
    rl = make_redlock([canary.url])
    with pytest.raises(TypeError, match=r"\bfair\b"):
        rl.lock(key, 10, fair=fair)
    assert not canary.touched(), "the library connected to a master while refusing bad input"


@pytest.mark.parametrize(
    "name", ["hiredlock:fair:q:x", "hiredlock:fair:e:x", "hiredlock:fair:", b"hiredlock:fair:q:"]
)
@pytest.mark.parametrize("fair", [True, False], ids=["fair", "plain"])
def test_fair_queue_names_are_reserved(api, make_redlock, canary, name, fair):
    """A lock named like a fair lock's queue keys would collide with them: refused, naming the
    reserved prefix, before any connection."""
    rl = make_redlock([canary.url])
    with pytest.raises(ValueError, match="hiredlock:fair:"):
        rl.lock(name, 10, fair=fair)
    assert not canary.touched(), "the library connected to a master while refusing bad input"


# -- fencing ---------------------------------------------------------------------------------------


def test_a_fenced_fair_lock_does_not_jump_the_queue(api, make_redlock, masters5, key):
    """A fair lock with fencing=True either is refused (ValueError naming fencing, as read-write
    locks refuse it) or keeps the queue: an earlier waiter in line makes its blocking=False
    attempt fail."""
    rl = make_redlock(urls(masters5), retry_delay=RD, master_timeout=MT)
    try:
        lock = rl.lock(key, 30, fair=True, fencing=True)
    except ValueError as exc:
        assert "fencing" in str(exc), exc
        return
    add_dead_waiter(masters5, key, time.time_ns() // 1000 - 1_000_000, 5_000)
    got = lock.acquire(blocking=False)
    if got:
        lock.release()
    assert got is False, "a fenced fair lock went ahead of an earlier waiter still in line"
