"""auto_renew.  A watchdog thread per Redlock extends held locks every ~ttl/3; it stops
after release(), after rl.close(), when the owner thread has ended, and max_hold after the acquire;
a failed renewal marks the lock lost (lock.lost, on_lost(lock), validity 0, release() -> LockLost);
on_lost then runs on a thread of its own, so that a slow callback delays no other renewal.

Renewals are observed on the masters themselves: PTTL of the key, and INFO commandstats (EVALSHA +
EVAL calls), which nothing but the library's scripts increments."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from aio_support import run_async  # noqa: F401  (the fixture)
from features_support import (  # noqa: F401  (the leakcheck fixture)
    MT,
    ON_LOST_PREFIX,
    SLACK,
    WATCHDOG_PREFIX,
    leakcheck_fixture,
    lib_addrs,
    pttls,
    script_calls,
    wait_key_gone,
    watchdog_threads,
)
from support import assert_no_key, assert_values, urls, values, wait_until

from hiredlock import LockLost
from hiredlock.aio import AsyncRedlock

TTL = 1.0
RENEW_INTERVAL = TTL / 3


def assert_no_scripts_during(servers, seconds, what):
    """No EVALSHA/EVAL reaches any of `servers` for `seconds` (an observation window)."""
    before = script_calls(servers)
    time.sleep(seconds)
    after = script_calls(servers)
    assert after == before, f"scripts ran on the masters {what}: before={before} after={after}"


def test_renewed_through_5s_then_release_stops_it(engine, make_redlock, masters5, key, leakcheck):
    rl = make_redlock(urls(masters5), master_timeout=MT)
    lock = rl.lock(key, TTL, auto_renew=True)
    calls0 = script_calls(masters5)
    assert lock.acquire(blocking=False)
    threads = [t for t in watchdog_threads() if t.name == f"{WATCHDOG_PREFIX}{hex(id(rl))}"]
    assert len(threads) == 1, f"expected one watchdog thread for this Redlock: {watchdog_threads()}"
    token = lock.token
    t0 = time.monotonic()
    samples = 0
    while time.monotonic() - t0 < 5.0:
        vals = pttls(masters5, key)
        alive = sum(v > 0 for v in vals)
        assert alive >= 3, (
            f"at {time.monotonic() - t0:.2f}s only {alive} masters hold the key: PTTL={vals}"
        )
        assert lock.held and not lock.lost.is_set(), f"lock not held at {time.monotonic() - t0:.2f}"
        samples += 1
        time.sleep(0.1)
    assert samples >= 30
    assert lock.token == token, "the token changed while auto-renewed"
    assert_values(masters5, key, token)
    # A 1 s key alive after 5 s was extended at least 4 times on every master.
    grown = {p: script_calls(masters5)[p] - calls0[p] for p in calls0}
    assert all(g >= 4 for g in grown.values()), f"script calls per master during the hold: {grown}"
    assert len(watchdog_threads()) == 1
    lock.release()
    assert_no_key(masters5, key, "after release()")
    assert not lock.lost.is_set()
    assert_no_scripts_during(masters5, 1.2, "after release() (a renewal?)")
    leakcheck.close_and_check(rl)


@pytest.mark.parametrize("how", ["kill", "stop"])
def test_majority_down_marks_lost(engine, make_redlock, masters5, key, leakcheck, how):
    rl = make_redlock(urls(masters5), master_timeout=MT)
    calls = []
    called = threading.Event()

    def on_lost(lk):
        calls.append((lk, threading.current_thread().name))
        called.set()

    lock = rl.lock(key, TTL, auto_renew=True, on_lost=on_lost)
    calls0 = script_calls(masters5)
    assert lock.acquire(blocking=False)
    # Go down during the hold: after the first renewal reached every master.
    wait_until(
        lambda: all(n > calls0[p] for p, n in script_calls(masters5).items()),
        RENEW_INTERVAL + SLACK + 2,
        "a first renewal on every master",
    )
    assert lock.held and not called.is_set()
    master_timeout = rl.master_timeout_ms(lock.ttl * 1000) / 1000
    down = masters5[:3]
    for m in down:
        getattr(m, how)()
    t_down = time.monotonic()
    bound = RENEW_INTERVAL + master_timeout + SLACK
    assert lock.lost.wait(bound + 2), "lock.lost never set after 3 of 5 masters went down"
    lag = time.monotonic() - t_down
    assert lag <= bound, f"lock.lost set {lag:.3f}s after the masters went down (> {bound:.3f}s)"
    assert called.wait(5), "on_lost was not called"
    assert lock.validity == 0
    assert not lock.held
    # Nothing more happens to a lost lock: no second call over two more renewal intervals.
    time.sleep(2 * RENEW_INTERVAL)
    assert len(calls) == 1, calls
    assert calls[0][0] is lock
    # (not in the watchdog's thread: a slow callback would delay the other locks' renewals)
    assert calls[0][1].startswith(ON_LOST_PREFIX), f"on_lost ran in {calls[0][1]}"
    with pytest.raises(LockLost):
        lock.release()
    live = masters5[3:]
    if how == "stop":
        for m in down:
            m.cont()
        live = masters5
    leakcheck.close_and_check(rl, servers=live)


def test_no_renewal_after_close(engine, make_redlock, masters5, key, leakcheck):
    rl = make_redlock(urls(masters5), master_timeout=MT)
    lock = rl.lock(key, TTL, auto_renew=True)
    assert lock.acquire(blocking=False)
    other = rl.lock(key + ":b", 10, auto_renew=True)  # would outlive the checks if not released
    assert other.acquire(blocking=False)
    rl.close()
    assert not watchdog_threads(), "close() returned before the watchdog thread ended"
    # close() released both locks.
    assert_no_key(masters5, key, "after close()")
    assert_no_key(masters5, key + ":b", "after close()")
    assert_no_scripts_during(masters5, 1.2, "after close() (a renewal?)")
    assert not lock.lost.is_set() and not other.lost.is_set()
    leakcheck.close_and_check(rl)


def test_no_renewal_after_owner_thread_ended(engine, make_redlock, masters5, key, leakcheck):
    rl = make_redlock(urls(masters5), master_timeout=MT)
    box: dict[str, object] = {}

    def owner():
        lk = rl.lock(key, TTL, auto_renew=True)
        box["t0"] = time.monotonic()
        box["ok"] = lk.acquire(blocking=False)
        box["lock"] = lk  # kept alive on purpose: the watchdog must not renew it anyway

    th = threading.Thread(target=owner)
    th.start()
    th.join(10)
    assert not th.is_alive() and box["ok"] is True
    lock = box["lock"]
    t_gone = wait_key_gone(masters5, key, TTL + RENEW_INTERVAL + SLACK + 2, "(owner ended)")
    age = t_gone - box["t0"]
    bound = TTL + RENEW_INTERVAL + SLACK
    assert age <= bound, f"the key of a dead owner lived {age:.3f}s (> {bound:.3f}s): renewed?"
    assert_no_scripts_during(masters5, 0.5, "after the owner's key expired")
    assert lock is box["lock"]
    leakcheck.close_and_check(rl)


def test_max_hold_stops_renewal(engine, make_redlock, masters5, key, leakcheck):
    max_hold = 1.5
    rl = make_redlock(urls(masters5), master_timeout=MT)
    lock = rl.lock(key, TTL, auto_renew=True, max_hold=max_hold)
    t0 = time.monotonic()
    assert lock.acquire(blocking=False)
    t_gone = wait_key_gone(masters5, key, max_hold + TTL + SLACK + 2, "(max_hold)")
    age = t_gone - t0
    # Renewed until max_hold (the last renewal, at most ttl/3 before it, lasts a whole ttl) ...
    assert age >= max_hold, f"the key expired after {age:.3f}s, before max_hold ({max_hold}s)"
    # ... and never after it.
    bound = max_hold + TTL + SLACK
    assert age <= bound, f"the key lived {age:.3f}s (> max_hold + ttl + slack = {bound:.3f}s)"
    assert not lock.held
    assert_no_scripts_during(masters5, 0.5, "after max_hold")
    with pytest.raises(LockLost):
        lock.release()
    leakcheck.close_and_check(rl)


@pytest.mark.parametrize("when", ["before-first-renewal", "after-first-renewal"])
def test_lock_dropped_by_gc_is_not_renewed_forever(
    engine, make_redlock, masters5, key, leakcheck, when
):
    """The watchdog holds locks weakly (its documented contract): an auto-renewed Lock nobody
    references any more is collected and expires (a ttl after its last renewal); close() then
    still succeeds and leaves nothing."""
    import gc
    import weakref

    rl = make_redlock(urls(masters5), master_timeout=MT)
    lock = rl.lock(key, TTL, auto_renew=True)
    calls0 = script_calls(masters5)
    assert lock.acquire(blocking=False)
    if when == "after-first-renewal":
        wait_until(
            lambda: all(n > calls0[p] for p, n in script_calls(masters5).items()),
            RENEW_INTERVAL + SLACK + 2,
            "a first renewal on every master",
        )
    ref = weakref.ref(lock)
    del lock
    gc.collect()
    t_drop = time.monotonic()
    wait_until(
        lambda: gc.collect() is not None and ref() is None,
        RENEW_INTERVAL + SLACK + 0.5,
        "the dropped Lock object to be collected (the library still references it)",
    )
    t_gone = wait_key_gone(
        masters5, key, TTL + RENEW_INTERVAL + SLACK + 2, "(Lock dropped by its user)"
    )
    assert t_gone - t_drop <= TTL + RENEW_INTERVAL + SLACK
    leakcheck.close_and_check(rl)


def test_minority_down_keeps_renewing(engine, make_redlock, masters5, key, leakcheck):
    """2 of 5 masters killed: renewals still reach a quorum; the lock is neither lost nor
    expired on the three live masters."""
    rl = make_redlock(urls(masters5), master_timeout=MT)
    lost = []
    lock = rl.lock(key, TTL, auto_renew=True, on_lost=lost.append)
    assert lock.acquire(blocking=False)
    assert_values(masters5, key, lock.token)  # the masters beyond the quorum follow
    for m in masters5[:2]:
        m.kill()
    live = masters5[2:]
    t0 = time.monotonic()
    while time.monotonic() - t0 < 1.5 * TTL:
        vals = pttls(live, key)
        assert all(v > 0 for v in vals), f"at {time.monotonic() - t0:.2f}s PTTL={vals}"
        assert lock.held and not lock.lost.is_set() and not lost, (
            f"at {time.monotonic() - t0:.2f}s: held={lock.held} validity={lock.validity:.3f} "
            f"lost={lock.lost.is_set()} on_lost calls={lost} PTTL={vals}"
        )
        time.sleep(0.1)
    assert_values(live, key, lock.token)
    lock.release()  # 3 of 5 still hold it: no LockLost
    assert_no_key(live, key)
    leakcheck.close_and_check(rl, servers=live)


def test_raising_on_lost_does_not_stop_other_renewals(
    engine, make_redlock, masters5, key, leakcheck
):
    """One lock's on_lost raises; the watchdog goes on renewing the Redlock's other lock."""
    rl = make_redlock(urls(masters5), master_timeout=MT)
    called = threading.Event()

    def bad_callback(lk):
        called.set()
        raise RuntimeError("callback bug")

    doomed = rl.lock(key + ":doomed", TTL, auto_renew=True, on_lost=bad_callback)
    kept = rl.lock(key + ":kept", TTL, auto_renew=True)
    assert doomed.acquire(blocking=False) and kept.acquire(blocking=False)
    assert_values(masters5, key + ":doomed", doomed.token)  # no late SET re-creates it
    for m in masters5:
        m.admin().delete(key + ":doomed")  # the next renewal finds it gone
    assert doomed.lost.wait(RENEW_INTERVAL + SLACK + 1)
    assert called.wait(5)
    t0 = time.monotonic()
    while time.monotonic() - t0 < 1.5 * TTL:  # kept is renewed past its ttl
        assert all(v > 0 for v in pttls(masters5, key + ":kept")), pttls(masters5, key + ":kept")
        assert kept.held and not kept.lost.is_set()
        time.sleep(0.1)
    assert watchdog_threads(), "the watchdog thread died"
    kept.release()
    with pytest.raises(LockLost):
        doomed.release()
    leakcheck.close_and_check(rl)


def test_slow_on_lost_does_not_stall_other_renewals(engine, make_redlock, masters5, key, leakcheck):
    """One lock's on_lost blocks for 3 s; the Redlock's other lock (ttl 0.5 s: it would expire
    six times over if its renewals waited for the callback) is renewed throughout, and the lost
    lock's `lost` is set before its callback runs."""
    ttl = 0.5
    stall = 3.0
    rl = make_redlock(urls(masters5), master_timeout=MT)
    started = threading.Event()
    finished = threading.Event()
    seen_lost = []

    def slow_callback(lk):
        seen_lost.append(lk.lost.is_set())
        started.set()
        time.sleep(stall)
        finished.set()

    doomed = rl.lock(key + ":doomed", ttl, auto_renew=True, on_lost=slow_callback)
    kept_lost = []
    kept = rl.lock(key + ":kept", ttl, auto_renew=True, on_lost=kept_lost.append)
    assert doomed.acquire(blocking=False) and kept.acquire(blocking=False)
    assert_values(masters5, key + ":doomed", doomed.token)  # no late SET re-creates it
    for m in masters5:
        m.admin().delete(key + ":doomed")  # its next renewal finds it gone
    assert started.wait(ttl + SLACK + 1), "the doomed lock's on_lost was not called"
    assert seen_lost == [True], "on_lost ran before lock.lost was set"
    assert finished.wait(stall + SLACK + 2), "the slow on_lost did not return"
    assert not kept.lost.is_set() and not kept_lost, (
        f"the kept lock was lost while another lock's on_lost ran: PTTL="
        f"{pttls(masters5, key + ':kept')}"
    )
    held_by_kept = sum(v == kept.token.encode() for v in values(masters5, key + ":kept"))
    assert held_by_kept >= 3, f"the kept lock's key: {values(masters5, key + ':kept')}"
    kept.release()
    with pytest.raises(LockLost):
        doomed.release()
    leakcheck.close_and_check(rl)


def test_slow_async_on_lost_does_not_stall_other_renewals(
    engine,
    masters5,
    key,
    run_async,  # noqa: F811
):
    """AsyncRedlock: one lock's on_lost (a coroutine function) takes 3 s; the client's other
    lock (ttl 0.5 s) is renewed throughout by its own task, and `lost` is set before the
    callback runs. (A plain on_lost runs in the loop: it must not block, see the README.)"""
    ttl = 0.5
    stall = 3.0
    threads_before = set(threading.enumerate())
    clients_before = lib_addrs(masters5)

    async def main():
        rl = AsyncRedlock(urls(masters5), backend=engine, master_timeout=MT)
        started = asyncio.Event()
        finished = asyncio.Event()
        seen_lost = []

        async def slow_callback(lk):
            seen_lost.append(lk.lost.is_set())
            started.set()
            await asyncio.sleep(stall)
            finished.set()

        doomed = rl.lock(key + ":doomed", ttl, auto_renew=True, on_lost=slow_callback)
        kept_lost = []
        kept = rl.lock(key + ":kept", ttl, auto_renew=True, on_lost=kept_lost.append)
        assert await doomed.acquire(blocking=False) and await kept.acquire(blocking=False)
        for m in masters5:
            m.admin().delete(key + ":doomed")  # its next renewal finds it gone
        await asyncio.wait_for(started.wait(), ttl + SLACK + 1)
        assert seen_lost == [True], "on_lost ran before lock.lost was set"
        await asyncio.wait_for(finished.wait(), stall + SLACK + 2)
        assert not kept.lost.is_set() and not kept_lost, (
            f"the kept lock was lost while another lock's on_lost ran: PTTL="
            f"{pttls(masters5, key + ':kept')}"
        )
        held_by_kept = sum(v == kept.token.encode() for v in values(masters5, key + ":kept"))
        assert held_by_kept >= 3, f"the kept lock's key: {values(masters5, key + ':kept')}"
        await kept.release()
        with pytest.raises(LockLost):
            await doomed.release()
        await rl.aclose()
        return [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]

    left = run_async(main())
    assert not left, f"tasks left running after aclose(): {left}"
    assert set(threading.enumerate()) <= threads_before, "a thread outlived aclose()"
    wait_until(
        lambda: all(now <= clients_before[p] for p, now in lib_addrs(masters5).items()),
        5,
        "no library connection left after aclose()",
    )


def test_manual_extend_failure_marks_lost(engine, make_redlock, masters5, key, leakcheck):
    rl = make_redlock(urls(masters5), master_timeout=MT)
    calls = []
    lock = rl.lock(key, 10, on_lost=calls.append)
    assert lock.acquire(blocking=False)
    assert_values(masters5, key, lock.token)  # no late SET may re-create a deleted key
    for m in masters5[:3]:
        m.admin().delete(key)
    with pytest.raises(LockLost):
        lock.extend()
    assert lock.lost.is_set() and calls == [lock]
    assert lock.validity == 0 and not lock.held
    with pytest.raises(LockLost):
        lock.release()
    # The same Lock object can be acquired again: the lost flag starts afresh.
    assert lock.acquire(blocking=False)
    assert not lock.lost.is_set() and lock.held
    lock.release()
    assert calls == [lock]
    assert_no_key(masters5, key)
    leakcheck.close_and_check(rl)


def test_reacquired_lock_has_a_single_renewal_chain(engine, make_redlock, masters5, key, leakcheck):
    """Acquire/release the same auto-renewed Lock 5 times, then hold it: only the current
    acquisition is renewed (stale chains would multiply the EXTENDs)."""
    rl = make_redlock(urls(masters5), master_timeout=MT)
    lock = rl.lock(key, TTL, auto_renew=True)
    for _ in range(5):
        assert lock.acquire(blocking=False)
        lock.release()
    assert lock.acquire(blocking=False)
    assert_values(masters5, key, lock.token)  # the masters beyond the quorum follow
    before = script_calls(masters5)
    t0 = time.monotonic()
    hold = 1.5
    while time.monotonic() - t0 < hold:
        assert all(v > 0 for v in pttls(masters5, key))
        time.sleep(0.1)
    per_master = {p: v - before[p] for p, v in script_calls(masters5).items()}
    # One chain: about hold / (ttl/3) = 4.5 EXTENDs; five chains would send ~5 times as many.
    assert all(n <= 9 for n in per_master.values()), f"EXTENDs per master: {per_master}"
    lock.release()
    assert_no_key(masters5, key)
    leakcheck.close_and_check(rl)


def test_synchronized_auto_renew(engine, make_redlock, masters5, key, leakcheck):
    """@rl.synchronized(..., auto_renew=True): a function running 3 ttls long keeps the lock."""
    ttl = 0.3
    rl = make_redlock(urls(masters5), master_timeout=MT)

    @rl.synchronized(lambda job: f"{key}:{job}", ttl, blocking_timeout=1, auto_renew=True)
    def long_job(job):
        name = f"{key}:{job}"
        t0 = time.monotonic()
        while time.monotonic() - t0 < 3 * ttl:
            vals = pttls(masters5, name)
            assert sum(v > 0 for v in vals) >= 3, f"at {time.monotonic() - t0:.2f}s PTTL={vals}"
            time.sleep(0.03)
        return name

    name = long_job("a")
    assert_no_key(masters5, name, "after the function returned")
    assert_no_scripts_during(masters5, 0.3, "after the function returned")
    leakcheck.close_and_check(rl)
