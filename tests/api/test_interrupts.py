"""Every round that follows an attempt goes out whatever happens to its caller: the unlock after a
failed attempt, and the clean-up after an interruption.

* An acquire interrupted after its SETs went out (Ctrl-C, a signal handler's exception) unlocks
  every master before the exception propagates: no stray key blocks the name for its whole ttl.
* A cancelled or interrupted acquire (of every lock kind), acquire_many or release_many leaves no
  key of ours on any master once stopped masters resume, and the interruption itself surfaces
  promptly even with a long master timeout: the clean-up round writes its unlocks and waits only
  a short bound for the replies (a stopped master runs them when it resumes).
"""

from __future__ import annotations

import asyncio
import random
import signal
import time
import traceback

import pytest
from aio_support import run_async  # noqa: F401  (the fixture)
from support import assert_no_key, debug_sleep, kb, urls

from hiredlock import Lock, Redlock
from hiredlock._lock import WithStatement
from hiredlock.aio import AsyncRedlock


@pytest.fixture
def interrupt_after():
    """interrupt_after(seconds): SIGALRM then, whose handler raises Interrupted."""

    def handler(signum, frame):
        raise Interrupted()

    previous = signal.signal(signal.SIGALRM, handler)

    def arm(seconds: float) -> None:
        signal.setitimer(signal.ITIMER_REAL, seconds)

    yield arm
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("fencing", [False, True], ids=["plain", "fenced"])
def test_an_interrupted_acquire_leaves_no_key(
    engine, make_redlock, masters5, key, interrupt_after, fencing
):
    """Two of three masters sleep 0.4 s: the SETs are out, the quorum is not in yet when the
    signal comes. Once the sleepers wake, no master may hold our token."""
    servers = masters5[:3]
    rl = make_redlock(urls(servers), master_timeout=1.0)
    lock = rl.lock(key, 30, fencing=fencing)
    sleepers = debug_sleep(servers[1:], 0.4)
    try:
        interrupt_after(0.05)
        with pytest.raises(Interrupted):
            lock.acquire(blocking=False)
    finally:
        for sock in sleepers:
            sock.close()
    assert not lock.held
    assert_no_key(servers, key, "after the interrupted acquire", timeout=3)


INTERRUPTS = 150


def test_an_interrupt_anywhere_in_a_cycle_leaves_no_key(engine, make_redlock, masters5, key):
    """A KeyboardInterrupt raised at any point of a `with lock:` loop, even after the lock was
    taken or while it is being let go, leaves neither a key nor a held Lock behind: an interrupted
    acquire gives the lock back, an interrupted release still releases. (`with`, as users write
    it: an interrupt between a bare acquire() and release() in the caller's own code would leave
    the lock held, as it would a threading.Lock.)"""
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    servers = masters5[:3]
    rl = make_redlock(urls(servers), master_timeout=0.5)
    lock = rl.lock(key, 30, blocking_timeout=0)  # `with` tries once: nobody else holds it
    previous = signal.signal(signal.SIGALRM, _raise_keyboard_interrupt)
    try:
        for attempt in range(INTERRUPTS):
            delay = rng.uniform(0.00005, 0.004)
            where = f"seed {seed}, interrupt {attempt} at {delay * 1e6:.0f} us"
            try:
                signal.setitimer(signal.ITIMER_REAL, delay)
                while True:
                    with lock:
                        pass
            except KeyboardInterrupt as interrupt:
                if lock.held:
                    # CPython may run a signal handler at a function's first instruction, before
                    # any of its code: at the entry of __exit__ or release() nothing of ours ran
                    # yet, and the Lock still holds the lock, which release() then lets go
                    # (README, "Interrupts and fork"). Anywhere else the lock must be given back.
                    assert _interrupted_at_entry(interrupt, WithStatement.__exit__, Lock.release), (
                        where,
                        traceback.format_tb(interrupt.__traceback__),
                    )
                    lock.release()
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            assert not lock.held, where
            assert_no_key(servers, key, f"({where})", timeout=3)
    finally:
        signal.signal(signal.SIGALRM, previous)


def _interrupted_at_entry(exc: BaseException, *functions) -> bool:
    """The interrupt came at the first instruction of one of `functions` (the innermost frame
    of ours in its traceback is one of them, at its `def` line)."""
    codes = {function.__code__: function.__code__.co_firstlineno for function in functions}
    entry = None
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code in codes:
            entry = tb.tb_lineno == codes[code]
        tb = tb.tb_next
    return bool(entry)


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt


# -- cancelled and interrupted rounds of every kind ------------------------------------------------


TTL = 30.0  # long: a key left behind is seen, not hidden by its expiry
NAMES = 8
TASKS = 40
KINDS = ["lock", "fair", "read", "write", "semaphore"]


def ours_left(servers, names: list[str]) -> list:
    """Every key of these names on the masters (their own and their kind's)."""
    found = []
    for server in servers:
        admin = server.admin()
        for k in admin.keys("*"):
            if any(kb(name) in k for name in names):
                found.append((server.port, k, admin.type(k), admin.pttl(k)))
    return found


def resume(stopped) -> None:
    """SIGCONT; returns once each master has run everything it had buffered."""
    for server in stopped:
        server.cont()


def make_waiter(rl, kind: str, name: str):
    """What a task waits on: a lock object of `kind`, or the semaphore."""
    if kind == "lock":
        return rl.lock(name, TTL)
    if kind == "fair":
        return rl.lock(name, TTL, fair=True)
    if kind == "read":
        return rl.rwlock(name, TTL).read()
    if kind == "write":
        return rl.rwlock(name, TTL).write()
    return rl.semaphore(name, 2, TTL)


@pytest.mark.each_value_once
@pytest.mark.parametrize("kind", KINDS)
def test_cancelled_waiters_leave_no_key(engine, masters5, key, run_async, kind):  # noqa: F811
    """2 of 3 masters stopped, 40 tasks waiting on 8 names (each attempt fails: no quorum can
    answer), each cancelled at a random moment: once the masters resume, no key of ours is
    left. Every attempt's unlock must go out, whenever the cancellation comes."""
    servers = masters5[:3]
    names = [f"{key}:{i}" for i in range(NAMES)]
    rng = random.Random(f"{key}:{kind}")

    async def main() -> list:
        rl = AsyncRedlock(
            urls(servers),
            backend=engine,
            master_timeout=0.05,
            retry_delay=0.01,
            retry_count=1_000_000,  # (waiters keep trying while the majority is stopped)
        )
        try:
            await rl.connect()
            for server in servers[1:]:
                server.stop()
            waiters = [make_waiter(rl, kind, names[i % NAMES]) for i in range(TASKS)]
            tasks = [asyncio.ensure_future(w.acquire()) for w in waiters]
            loop = asyncio.get_running_loop()
            for task in tasks:
                loop.call_later(rng.uniform(0.0, 0.4), task.cancel)
            outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            # (resumed before the client closes: what it still had to write to a stopped
            # master, past what the master's socket took, goes out as it closes)
            await asyncio.to_thread(resume, servers[1:])
            await rl.aclose()
        return outcomes

    try:
        outcomes = run_async(main())
    finally:
        resume([server for server in servers[1:] if server.stopped])
    wrong = [o for o in outcomes if not isinstance(o, asyncio.CancelledError)]
    assert not wrong, f"a waiter ended otherwise than cancelled: {wrong[:3]}"
    time.sleep(1.0)
    left = ours_left(servers, names)
    assert not left, f"{len(left)} keys of ours left 1 s after SIGCONT: {left[:4]}"


BATCH = 50


def test_cancelled_acquire_many_unlocks_what_it_sent(engine, masters5, key, run_async):  # noqa: F811
    """acquire_many's round went out to 3 masters, 2 of them stopped: the task is cancelled
    while it waits; once they resume, none of the 50 names is held."""
    servers = masters5[:3]
    names = [f"{key}:{i}" for i in range(BATCH)]

    async def main() -> object:
        rl = AsyncRedlock(urls(servers), backend=engine, master_timeout=1.0)
        try:
            await rl.connect()
            for server in servers[1:]:
                server.stop()
            task = asyncio.ensure_future(rl.acquire_many(names, TTL))
            await asyncio.sleep(0.05)  # (its round is out)
            task.cancel()
            outcome = await asyncio.gather(task, return_exceptions=True)
        finally:
            await rl.aclose()
        return outcome[0]

    try:
        outcome = run_async(main())
    finally:
        resume(servers[1:])
    assert isinstance(outcome, asyncio.CancelledError), outcome
    left = ours_left(servers, names)
    assert not left, f"{len(left)} keys of ours left after the cancelled acquire_many"


class Interrupted(Exception):
    """Raised by the test's signal handler, as a signal-based timeout would."""


def interrupt_in(seconds: float) -> float:
    """Arms SIGALRM, whose handler raises Interrupted; returns when it will fire."""

    def handler(signum, frame):
        raise Interrupted()

    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    return time.monotonic() + seconds


@pytest.fixture
def alarm():
    previous = signal.getsignal(signal.SIGALRM)
    yield interrupt_in
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


def test_interrupted_sync_acquire_many_unlocks_what_it_sent(engine, masters5, key, alarm):
    servers = masters5[:3]
    names = [f"{key}:{i}" for i in range(BATCH)]
    rl = Redlock(urls(servers), backend=engine, master_timeout=1.0)
    try:
        rl.connect()
        for server in servers[1:]:
            server.stop()
        alarm(0.05)
        with pytest.raises(Interrupted):
            rl.acquire_many(names, TTL)
    finally:
        resume(servers[1:])
        rl.close()
    left = ours_left(servers, names)
    assert not left, f"{len(left)} keys of ours left after the interrupted acquire_many"


def test_interrupted_release_many_releases_every_lock(engine, masters5, key, alarm):
    servers = masters5[:3]
    names = [f"{key}:{i}" for i in range(BATCH)]
    rl = Redlock(urls(servers), backend=engine, master_timeout=1.0)
    try:
        locks = rl.acquire_many(names, TTL)
        assert all(locks)
        for server in servers[1:]:
            server.stop()
        alarm(0.05)
        with pytest.raises(Interrupted):
            rl.release_many(locks)
        assert not any(lock.held for lock in locks), "an interrupted release_many lets go"
    finally:
        resume(servers[1:])
        rl.close()
    left = ours_left(servers, names)
    assert not left, f"{len(left)} keys of ours left after the interrupted release_many"


# -- a prompt interrupt with a long master timeout ----------------------------------------------

LONG_TIMEOUT = 3.0
# The interrupt's clean-up writes its unlocks and waits about 100 ms for their replies; the
# bound leaves room for a loaded machine, and is far below the master timeout it replaces.
PROMPT = 0.6


@pytest.mark.parametrize("call", ["acquire", "release"])
def test_an_interrupt_is_prompt_with_a_long_master_timeout(engine, masters5, key, alarm, call):
    servers = masters5[:3]
    rl = Redlock(urls(servers), backend=engine, master_timeout=LONG_TIMEOUT)
    lock = rl.lock(key, TTL)
    try:
        rl.connect()
        if call == "release":
            assert lock.acquire(blocking=False)
        for server in servers[1:]:
            server.stop()
        fired_at = alarm(0.1)
        with pytest.raises(Interrupted):
            lock.acquire(blocking=False) if call == "acquire" else lock.release()
        late = time.monotonic() - fired_at
        assert not lock.held
    finally:
        resume(servers[1:])
        rl.close()
    assert late < PROMPT, f"the interrupt surfaced {late:.3f} s after the signal"
    assert not ours_left(servers, [key]), "a key of ours is left after SIGCONT"


@pytest.mark.each_value_once
@pytest.mark.parametrize("call", ["acquire", "release"])
def test_a_cancellation_is_prompt_with_a_long_master_timeout(
    engine,
    masters5,
    key,
    run_async,  # noqa: F811
    call,
):
    servers = masters5[:3]

    async def main() -> float:
        rl = AsyncRedlock(urls(servers), backend=engine, master_timeout=LONG_TIMEOUT)
        lock = rl.lock(key, TTL)
        try:
            await rl.connect()
            if call == "release":
                assert await lock.acquire(blocking=False)
            for server in servers[1:]:
                server.stop()
            task = asyncio.ensure_future(
                lock.acquire(blocking=False) if call == "acquire" else lock.release()
            )
            await asyncio.sleep(0.1)
            cancelled_at = time.monotonic()
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            late = time.monotonic() - cancelled_at
            assert task.cancelled()
            assert not lock.held
        finally:
            await asyncio.to_thread(resume, servers[1:])
            await rl.aclose()
        return late

    try:
        late = run_async(main())
    finally:
        resume([server for server in servers[1:] if server.stopped])
    # (the round in flight is waited for, up to its master timeout, so that the unlock cannot
    # be lost to a loop that stops or blocks after the cancellation; the clean-up adds little)
    assert late < LONG_TIMEOUT + PROMPT, f"the cancellation surfaced {late:.3f} s after cancel()"
    assert not ours_left(servers, [key]), "a key of ours is left after SIGCONT"


# -- an interrupted release of a fair lock ---------------------------------------------------------


def _interrupted_before_its_first_round(steps):
    """Steps whose first request is interrupted before it went out (the exception thrown at that
    request, as both drivers do), then driven as they go on."""
    steps.send(None)
    request = steps.throw(KeyboardInterrupt())
    while True:
        reply = yield request
        request = steps.send(reply)


@pytest.mark.parametrize("where", ["in the steps", "before the steps"])
def test_an_interrupted_release_of_a_fair_lock_takes_its_ticket_out_of_the_queue(
    engine, make_redlock, masters5, key, where
):
    """The holder's ticket stays first in the fair queue while it holds the lock. A release
    interrupted before its round went out (in its steps, or in release() before they ran) sends
    the unlock instead: it must take the ticket out of the queue too, else the next waiter is
    refused until the holder's ttl ran out, with nobody holding the lock."""
    servers = masters5[:3]
    rl = make_redlock(urls(servers))
    lock = rl.lock(key, TTL, fair=True)
    assert lock.acquire(blocking=False)
    if where == "in the steps":
        steps = _interrupted_before_its_first_round(lock._release_steps())
        with pytest.raises(KeyboardInterrupt):
            lock._rounds.run(steps)
    else:
        token = lock._token
        lock._rounds.run(lock._unlock_steps(token))  # (release()'s own fallback)
    assert not lock.held
    assert not ours_left(servers, [key])
    assert make_redlock(urls(servers)).lock(key, TTL, fair=True).acquire(blocking=False)
