"""acquire(timeout=...) is an overall deadline; timeout=None waits until the holder
releases, and returns soon after the release."""

from __future__ import annotations

import threading
import time

import pytest
from features_support import MT, SLACK, leakcheck_fixture  # noqa: F401  (fixture)
from support import assert_held_on_quorum, assert_no_key, assert_values, urls, wait_until


@pytest.mark.parametrize("retry_delay", [0.05, 0.2])
def test_timeout_on_held_name_returns_false_within_deadline(
    engine, make_redlock, masters5, key, leakcheck, retry_delay
):
    holder_rl = make_redlock(urls(masters5), master_timeout=MT)
    rl = make_redlock(urls(masters5), master_timeout=MT, retry_delay=retry_delay)
    holder = holder_rl.lock(key, 10)
    assert holder.acquire(blocking=False)
    waiter = rl.lock(key, 10)
    t0 = time.monotonic()
    got = waiter.acquire(timeout=0.5)
    elapsed = time.monotonic() - t0
    assert got is False
    assert not waiter.held and waiter.token is None
    assert elapsed >= 0.5, f"returned before the deadline: {elapsed:.3f}s"
    bound = 0.5 + retry_delay * 1.5 + SLACK
    assert elapsed <= bound, f"acquire(timeout=0.5) took {elapsed:.3f}s (> {bound:.3f}s)"
    # The holder was never disturbed: its token is still on every master.
    assert_values(masters5, key, holder.token)
    holder.release()
    leakcheck.close_and_check(holder_rl, rl)


def test_timeout_zero_is_one_attempt(engine, make_redlock, masters5, key, leakcheck):
    rl = make_redlock(urls(masters5), master_timeout=MT, retry_delay=0.2)
    holder = rl.lock(key, 10)
    assert holder.acquire(blocking=False)
    waiter = rl.lock(key, 10)
    t0 = time.monotonic()
    assert waiter.acquire(timeout=0) is False
    assert time.monotonic() - t0 <= 0.1 + SLACK
    holder.release()
    leakcheck.close_and_check(rl)


def test_timeout_none_acquires_right_after_release(engine, make_redlock, masters5, key, leakcheck):
    retry_delay = 0.2
    holder_rl = make_redlock(urls(masters5), master_timeout=MT)
    rl = make_redlock(urls(masters5), master_timeout=MT, retry_delay=retry_delay)
    held = threading.Event()
    go_release = threading.Event()
    times: dict[str, float] = {}
    errors: list[str] = []
    holder = holder_rl.lock(key, 30)

    def hold():
        try:
            assert holder.acquire(blocking=False)
            held.set()
            assert go_release.wait(30)
            times["release_start"] = time.monotonic()
            holder.release()
            times["released"] = time.monotonic()
        except BaseException as exc:
            errors.append(repr(exc))
            held.set()

    waiter = rl.lock(key, 30)
    result: dict[str, object] = {}

    def wait_for_it():
        try:
            result["got"] = waiter.acquire(timeout=None)
            times["acquired"] = time.monotonic()
        except BaseException as exc:
            errors.append(repr(exc))

    th = threading.Thread(target=hold)
    th.start()
    assert held.wait(10)
    assert not errors, errors
    tw = threading.Thread(target=wait_for_it)
    tw.start()
    # The waiter has been refused at least once (a failed attempt leaves its votes behind) ...
    wait_until(lambda: waiter.last_votes, 5, "the waiter's first refused attempt")
    # ... and keeps waiting while the lock is held (an observation window, not synchronisation).
    tw.join(0.6)
    assert tw.is_alive(), f"acquire(timeout=None) returned while the lock was held: {result}"
    go_release.set()
    th.join(10)
    tw.join(10)
    assert not th.is_alive() and not tw.is_alive()
    assert not errors, errors
    assert result["got"] is True
    assert waiter.held
    assert times["acquired"] >= times["release_start"]
    lag = times["acquired"] - times["released"]
    bound = retry_delay * 1.5 + SLACK
    assert lag <= bound, f"the waiter acquired {lag:.3f}s after the release (> {bound:.3f}s)"
    assert_held_on_quorum(masters5, key, waiter.token)
    waiter.release()
    assert_no_key(masters5, key)
    leakcheck.close_and_check(holder_rl, rl)
