"""Waiters woken by release notices: a release SPUBLISHes on `hiredlock:released:<key>`, and a
waiting acquire (subscribed there through one pub/sub connection per master per client) tries
again at once instead of at its retry timer.

Both engines and both APIs (support/apis.py), except where a fork is the subject. The timer and the
notice are told apart by margins, not by tight timings: the waiters' retry_delay is 20 s, so the
timer would wake them 10 s after their first attempt at the earliest, and their acquire's timeout
(WAIT_S) is below that; a waiter the timer served gets the lock only at that deadline (its last
attempt), while a woken one gets it within WOKEN_S of the release. How fast a hand-off is belongs
to the benchmarks (bench/test_handoff.py)."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from aio_support import run_async  # noqa: F401  (the fixture)
from apis import make_redlock_fixture, pytest_generate_tests, sync_only, timed  # noqa: F401
from features_support import MT, lock_keys
from support import (
    EVENTUAL,
    EXTRA_SLACK,
    FOREIGN,
    InThread,
    assert_no_key,
    assert_values,
    braced,
    in_child,
    open_connections,
    set_foreign,
    urls,
    values,
    wait_until,
)

from hiredlock import HiredlockError
from hiredlock.aio import AsyncRedlock

CHANNEL_PREFIX = b"hiredlock:released:"
NOTICES_THREAD_PREFIX = "hiredlock-notices-"

# The waiters' retry delay: their timer fires 10 to 30 s after a failed attempt.
SLOW_RETRY = 20.0
# A waiter's acquire timeout: below the timer's 10 s, so a waiter no notice woke still returns
# (True, at this deadline: its last attempt finds the lock free) instead of holding the test up.
WAIT_S = 8.0
# A woken waiter gets the lock within this of the release (hand-offs take milliseconds; the
# margin is for a loaded CI machine, and stays far below WAIT_S).
WOKEN_S = 3.0 + EXTRA_SLACK
# The holders' ttl: their keys must not expire during a test (a waiter also wakes when the
# holder's keys expire, see test_a_dead_holders_lock_is_taken_when_its_keys_expire).
HOLD_TTL = 60


def channel(key) -> bytes:
    """The channel a release of `key` (a lock's name, or a semaphore's) is announced on."""
    return CHANNEL_PREFIX + braced(key)


def subscribers(server, key) -> int:
    # (sharded channels: the waiters SSUBSCRIBE, the scripts SPUBLISH)
    return server.admin().pubsub_shardnumsub(channel(key))[0][1]


def wait_subscribed(servers, key, n=1, what="the waiter"):
    """Until `n` connections are subscribed to key's channel on every server: the waiter has
    made its first attempt, registered, and every master confirmed its subscription."""
    wait_until(
        lambda: all(subscribers(s, key) == n for s in servers),
        10,
        f"{what} subscribed to {channel(key)!r} on every master",
    )


def pubsub_ids(server) -> set[str]:
    return {c["id"] for c in server.admin().client_list(_type="pubsub")}


def notices_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(NOTICES_THREAD_PREFIX)]


def set_calls(servers) -> int:
    """SET commands the servers ran (every attempt at a lock sends SET NX to every master)."""
    return sum(
        int(s.admin().info("commandstats").get("cmdstat_set", {}).get("calls", 0)) for s in servers
    )


class Waiter(InThread):
    """acquire(**kwargs) in a thread of its own: `got`, and t0/t1, the monotonic clock right
    before and after the call where it runs (in the task, on the async API)."""

    def __init__(self, acquire, **kwargs):
        super().__init__(lambda: timed(acquire, **kwargs))

    def join(self, timeout=WAIT_S + 30):
        self.got, self.t0, self.t1 = self.result(timeout)
        return self.got


def hold(make_redlock, masters, key, ttl=HOLD_TTL):
    """`key` held by a client of its own (which never waits, so it has no subscriber), on every
    master."""
    rl = make_redlock(urls(masters), master_timeout=MT)
    open_connections(rl)
    lock = rl.lock(key, ttl)
    assert lock.acquire(blocking=False)
    assert_values(masters, key, lock.token)
    return lock


def waiting_client(make_redlock, masters, **options):
    """A client whose waiters retry every 10 to 30 s unless woken; its connections are open
    (so that a lock it takes lands on every master)."""
    options.setdefault("retry_delay", SLOW_RETRY)
    rl = make_redlock(urls(masters), master_timeout=MT, **options)
    open_connections(rl)
    return rl


def assert_on_quorum(servers, key, token, n_masters=5):
    """A woken waiter's lock is on a quorum of the masters at least, not always on every one: it
    tries as soon as one master announces the release, and its SET may reach another master
    before the release does (there it is refused; the quorum is what counts)."""
    wait_until(
        lambda: sum(v == token.encode() for v in values(servers, key)) >= n_masters // 2 + 1,
        EVENTUAL,
        f"{key!r} held by {token} on a quorum: {values(servers, key)}",
    )


def assert_woken(waiter, released, what="the waiter"):
    got = waiter.join()
    assert got is True, f"{what} did not get the lock"
    lag = waiter.t1 - released
    assert lag <= WOKEN_S, (
        f"{what} got the lock {lag:.2f} s after the release (> {WOKEN_S} s): the timer served it, "
        "no notice woke it"
    )


# -- a release wakes the waiter; with wake=False it does not ---------------------------------------


@pytest.mark.parametrize("how", ["client-default", "lock-option"])
def test_a_release_wakes_the_waiter(api, make_redlock, masters5, key, how):
    """The waiter (retry timer 10..30 s) gets the lock right after the release. "lock-option":
    lock(wake=True) on a client made with wake=False: the lock's option wins."""
    holder = hold(make_redlock, masters5, key)
    if how == "client-default":
        rl = waiting_client(make_redlock, masters5)
        assert rl.wake is True
        lock = rl.lock(key, HOLD_TTL)
    else:
        rl = waiting_client(make_redlock, masters5, wake=False)
        assert rl.wake is False
        lock = rl.lock(key, HOLD_TTL, wake=True)
    waiter = Waiter(lock.acquire, timeout=WAIT_S)
    wait_subscribed(masters5, key)
    released = time.monotonic()
    holder.release()
    assert_woken(waiter, released)
    assert_on_quorum(masters5, key, lock.token)
    lock.release()
    assert_no_key(masters5, key)


def test_a_master_without_sharded_pub_sub_still_wakes_the_waiter(
    api, make_redlock, redis_factory, key
):
    """Masters that know no SSUBSCRIBE nor SPUBLISH (Redis before 7; here both commands are
    renamed away): the subscribers fall back to SUBSCRIBE and the scripts to PUBLISH."""
    old = redis_factory(
        3, extra_args=("--rename-command", "SSUBSCRIBE", "", "--rename-command", "SPUBLISH", "")
    )
    holder = hold(make_redlock, old, key)
    lock = waiting_client(make_redlock, old).lock(key, HOLD_TTL)
    waiter = Waiter(lock.acquire, timeout=WAIT_S)
    wait_until(
        lambda: all(s.admin().pubsub_numsub(channel(key))[0][1] == 1 for s in old),
        10,
        "the waiter subscribed with SUBSCRIBE on every master",
    )
    released = time.monotonic()
    holder.release()
    assert_woken(waiter, released)
    lock.release()


@pytest.mark.parametrize("how", ["client-wake-False", "lock-wake-False"])
def test_without_wake_a_release_does_not_wake_the_waiter(api, make_redlock, masters5, key, how):
    """wake=False, on the client or on the lock alone (its client waking the others): the
    waiter subscribes to nothing and sleeps through the release; it gets the lock only with its
    last attempt, at its deadline."""
    timeout = 1.0
    holder = hold(make_redlock, masters5, key)
    if how == "client-wake-False":
        rl = waiting_client(make_redlock, masters5, wake=False)
        lock = rl.lock(key, HOLD_TTL)
    else:
        rl = waiting_client(make_redlock, masters5)
        lock = rl.lock(key, HOLD_TTL, wake=False)
    before = {s.port: pubsub_ids(s) for s in masters5}
    waiter = Waiter(lock.acquire, timeout=timeout)
    wait_until(lambda: lock.last_votes, 5, "the waiter's first refused attempt")
    released = time.monotonic()
    holder.release()
    assert waiter.join() is True
    assert released - waiter.t0 < timeout / 2, "the release came too late to tell anything"
    assert waiter.t1 - waiter.t0 >= timeout, (
        f"acquire(timeout={timeout}) got the lock after {waiter.t1 - waiter.t0:.3f} s: "
        "something woke a waiter made with wake=False"
    )
    assert all(subscribers(s, key) == 0 for s in masters5)
    assert all(pubsub_ids(s) <= before[s.port] for s in masters5), "a subscriber was opened"
    lock.release()


# -- notices are hints: never a false acquire ------------------------------------------------------


def test_notices_published_by_hand_never_acquire(api, make_redlock, masters5, key):
    """Notices of a release that did not happen (PUBLISHed by hand, one master at a time) wake
    the waiter, and each attempt they trigger is refused by the masters: the holder keeps the
    lock on every master; the waiter gets it only after the real release."""
    holder = hold(make_redlock, masters5, key)
    rl = waiting_client(make_redlock, masters5)
    lock = rl.lock(key, HOLD_TTL)
    waiter = Waiter(lock.acquire, timeout=30)
    wait_subscribed(masters5, key)
    base = set_calls(masters5)
    published = 0
    deadline = time.monotonic() + 10
    # Until the notices made the waiter try three more times (a SET on every master each), and
    # at least 100 notices.
    while published < 100 or set_calls(masters5) < base + 3 * len(masters5):
        assert time.monotonic() < deadline, (
            f"{published} notices made {(set_calls(masters5) - base) / 5:g} attempts in 10 s"
        )
        masters5[published % len(masters5)].admin().spublish(channel(key), b"")
        published += 1
        assert not waiter.done.is_set(), f"acquire returned after {published} false notices"
    # (an observation window: an attempt in flight takes milliseconds)
    assert not waiter.done.wait(0.5), "acquire returned while the lock was held"
    assert holder.held
    assert_values(masters5, key, holder.token)
    released = time.monotonic()
    holder.release()
    assert_woken(waiter, released)
    assert_on_quorum(masters5, key, lock.token)
    lock.release()


def delay_the_next_wait(monkeypatch, api, delay):
    """Makes the next wait for a notice (after `armed` is set) start `delay` seconds late, as
    when the waiting thread or task is descheduled right after its refused attempt: `between` is
    set when that wait is called. Wraps the notices' wait(), whatever its arguments."""
    armed, between = threading.Event(), threading.Event()
    if api == "sync":
        from hiredlock._engines.notices import ThreadNotices as notices_class

        original = notices_class.wait

        def wait(self, *args, **kwargs):
            if armed.is_set():
                armed.clear()
                between.set()
                time.sleep(delay)
            return original(self, *args, **kwargs)

    else:
        from hiredlock.aio._notices import LoopNotices as notices_class

        original = notices_class.wait

        async def wait(self, *args, **kwargs):
            if armed.is_set():
                armed.clear()
                between.set()
                await asyncio.sleep(delay)
            return await original(self, *args, **kwargs)

    monkeypatch.setattr(notices_class, "wait", wait)
    return armed, between


def test_a_release_between_two_attempts_still_wakes_the_waiter(
    api, make_redlock, masters5, key, monkeypatch
):
    """The release comes after the waiter's attempt was refused (its unlock saw the holder's
    keys, 60 s from expiry) and before it waits again, while its channel is subscribed: the
    notice arrives then and must not be lost. (In a hand-off between many waiters this is
    common: the next holder releases while the others are finishing their refused attempt.)"""
    delay = 0.3
    timeout = 4.0  # (the timer: 10 s at the earliest; a lost notice shows as a lag of ~4 s)
    holder = hold(make_redlock, masters5, key)
    rl = waiting_client(make_redlock, masters5)
    lock = rl.lock(key, HOLD_TTL)
    armed, between = delay_the_next_wait(monkeypatch, api, delay)
    waiter = Waiter(lock.acquire, timeout=timeout)
    wait_subscribed(masters5, key)
    armed.set()
    masters5[0].admin().spublish(channel(key), b"")  # one more (refused) attempt
    assert between.wait(5), "the waiter did not try again"
    released = time.monotonic()
    holder.release()  # its notice arrives while the waiter is `delay` late for its wait
    got = waiter.join()
    assert got is True
    lag = waiter.t1 - released
    assert lag <= delay + 1.5 + EXTRA_SLACK, (
        f"the waiter got the lock {lag:.2f} s after the release, at its deadline: the release's "
        "notice came between its attempt and its wait, and was lost"
    )
    assert_on_quorum(masters5, key, lock.token)
    lock.release()


# -- lost notices: the timer, or the re-subscription, still serves ---------------------------------


@pytest.mark.parametrize("retry_delay", [0.2, SLOW_RETRY])
def test_subscribers_killed_before_the_release(api, make_redlock, masters5, key, retry_delay):
    """Every master drops the waiter's subscriber connection just before the release, whose
    notice then reaches nobody. The subscriber reconnects (after 0.1 s) and the confirmation of
    its subscription wakes the waiter; with retry_delay 0.2 its timer would serve it anyway."""
    holder = hold(make_redlock, masters5, key)
    rl = waiting_client(make_redlock, masters5, retry_delay=retry_delay)
    lock = rl.lock(key, HOLD_TTL)
    waiter = Waiter(lock.acquire, timeout=WAIT_S)
    wait_subscribed(masters5, key)
    for s in masters5:
        assert s.admin().client_kill_filter(_type="pubsub") >= 1
    released = time.monotonic()
    holder.release()
    assert_woken(waiter, released, "the waiter whose subscribers were killed")
    if retry_delay < 1:
        bound = retry_delay * 1.5 + 1.0 + EXTRA_SLACK
        assert waiter.t1 - released <= bound
    assert_on_quorum(masters5, key, lock.token)
    lock.release()


def test_tls_masters_named_by_host_wake_the_waiter(
    api, make_redlock, redis_factory, tls_certs, key
):
    """TLS masters given by host name, whose certificates name that host only (no address in
    them): the waiter's notice subscribers check the certificate against the name, as the engine
    does, so they subscribe and the release wakes the waiter."""
    servers = redis_factory(3, tls=tls_certs.server("localhost-only"))
    holder = hold(make_redlock, servers, key)
    by_name = [f"rediss://localhost:{s.tls_port}/0?ssl_ca_certs={tls_certs.ca}" for s in servers]
    rl = make_redlock(by_name, master_timeout=MT, retry_delay=SLOW_RETRY)
    open_connections(rl)
    lock = rl.lock(key, HOLD_TTL)
    waiter = Waiter(lock.acquire, timeout=WAIT_S)
    wait_subscribed(servers, key)
    released = time.monotonic()
    holder.release()
    assert_woken(waiter, released)
    assert_on_quorum(servers, key, lock.token, n_masters=3)
    lock.release()
    assert_no_key(servers, key)


def test_a_master_down_the_others_still_notify(api, make_redlock, masters5, key):
    """One master killed while the waiter waits: its subscriber is gone (and keeps failing to
    reconnect), and the four others' notices still wake the waiter, which takes the lock on them."""
    holder = hold(make_redlock, masters5, key)
    rl = waiting_client(make_redlock, masters5)
    lock = rl.lock(key, HOLD_TTL)
    waiter = Waiter(lock.acquire, timeout=WAIT_S)
    wait_subscribed(masters5, key)
    masters5[4].kill()
    live = masters5[:4]
    released = time.monotonic()
    holder.release()  # (4 of 5 released: a quorum, no LockLost)
    assert_woken(waiter, released)
    assert_on_quorum(live, key, lock.token)
    lock.release()
    assert_no_key(live, key)


def test_no_notices_at_all_the_timer_still_serves(api, make_redlock, redis_factory, key):
    """Masters whose ACL allows no pub/sub channel: the waiter's subscriptions are refused and
    the release's PUBLISH fails (inside the script, which releases all the same). The waiter
    gets the lock from its timer (retry_delay 0.2), and nothing raises."""
    retry_delay = 0.2
    servers = redis_factory(3)
    for s in servers:
        assert s.admin().acl_setuser(
            "locker",
            enabled=True,
            passwords=["+secret"],
            keys=["*"],
            commands=["+@all"],
            reset_channels=True,
        )
    masters = [f"redis://locker:secret@127.0.0.1:{s.port}/0" for s in servers]
    holder_rl = make_redlock(masters, master_timeout=MT)
    holder = holder_rl.lock(key, HOLD_TTL)
    assert holder.acquire(blocking=False)
    rl = make_redlock(masters, master_timeout=MT, retry_delay=retry_delay)
    lock = rl.lock(key, HOLD_TTL)
    waiter = Waiter(lock.acquire, timeout=WAIT_S)

    def refused_subscription(s):
        return any(
            entry.get("reason") == "channel" and entry.get("username") == "locker"
            for entry in s.admin().acl_log()
        )

    wait_until(lambda: all(refused_subscription(s) for s in servers), 10, "SUBSCRIBE refused")
    assert all(subscribers(s, key) == 0 for s in servers)
    released = time.monotonic()
    holder.release()
    assert all(v is None for v in (s.admin().get(key) for s in servers)), "the release failed"
    assert waiter.join() is True
    bound = retry_delay * 1.5 + 1.0 + EXTRA_SLACK
    assert waiter.t1 - released <= bound, f"{waiter.t1 - released:.2f} s after the release"
    lock.release()


# -- a holder that died ----------------------------------------------------------------------------


def test_a_dead_holders_lock_is_taken_when_its_keys_expire(api, make_redlock, masters5, key):
    """A crashed holder's keys (SET PX 1500 on every master, never released: no notice comes).
    The waiter's refused attempt learns when a quorum of them expires and tries again then, not
    at its timer (10 s at the earliest)."""
    rl = waiting_client(make_redlock, masters5)
    lock = rl.lock(key, 10)
    set_at = time.monotonic()
    for s in masters5:
        assert s.admin().set(key, "d" * 40, px=1500)
    waiter = Waiter(lock.acquire, timeout=WAIT_S)
    assert waiter.join() is True
    # never before the keys expired (10 ms: the servers' clock is not our monotonic one)
    assert waiter.t1 >= set_at + 1.5 - 0.01, f"acquired {waiter.t1 - set_at:.3f} s after the SET"
    assert waiter.t1 - set_at <= 1.5 + WOKEN_S, (
        f"acquired {waiter.t1 - set_at:.2f} s after the SET: not at the keys' expiry (1.5 s)"
    )
    assert_on_quorum(masters5, key, lock.token)
    lock.release()


# -- one subscriber per master, however many waiters ---------------------------------------------


def test_one_subscriber_per_master_for_all_waiters(api, make_redlock, masters5, key):
    """Ten waiters (threads; tasks on the async API) on one name of one client share one pub/sub
    connection per master (and, sync, one thread): one of them at a time tries the masters (the
    client's turns), the others wait behind it; after the release they all get the lock in turn;
    close() leaves no connection and no thread behind."""
    holder = hold(make_redlock, masters5, key)
    before = {s.port: pubsub_ids(s) for s in masters5}
    rl = waiting_client(make_redlock, masters5)
    locks = [rl.lock(key, HOLD_TTL) for _ in range(10)]

    def take_and_release(lock):
        # (timeout: a waiter no notice woke shows as a hand-off chain of ~5 s)
        got, _t0, _t1 = timed(lock.acquire, timeout=5)
        if got:
            lock.release()
        return got

    waiters = [InThread(lambda lock=lock: take_and_release(lock)) for lock in locks]
    wait_until(lambda: any(lock.last_votes for lock in locks), 10, "a waiter refused once")
    wait_subscribed(masters5, key)
    for s in masters5:
        mine = pubsub_ids(s) - before[s.port]
        assert len(mine) == 1, f"port {s.port}: {len(mine)} subscriber connections for 10 waiters"
    threads = notices_threads()
    if api == "sync":
        assert len(threads) == 1, threads
    else:
        assert threads == [], "AsyncRedlock started a thread"
    released = time.monotonic()
    holder.release()
    assert [w.result(WAIT_S + 30) for w in waiters] == [True] * 10
    assert time.monotonic() - released <= WOKEN_S, "the waiters were not woken one after another"
    assert_no_key(masters5, key)
    rl.close()
    assert notices_threads() == [], "a notices thread outlived close()"
    wait_until(
        lambda: all(pubsub_ids(s) <= before[s.port] for s in masters5),
        5,
        "no subscriber connection left after close()",
    )


# README: a client's subscribers (and a Redlock's notices thread) end 2 s after the last wait;
# the margin is for a loaded machine (the driver looks every 0.1 s).
NOTICES_LINGER_S = 2.0
LINGER_MARGIN_S = 1.0 + EXTRA_SLACK


def test_the_subscribers_end_soon_after_the_last_wait(api, make_redlock, masters5, key):
    hold(make_redlock, masters5, key)
    before = {s.port: pubsub_ids(s) for s in masters5}
    rl = waiting_client(make_redlock, masters5)
    got, _t0, last_wait = timed(rl.lock(key, HOLD_TTL).acquire, timeout=1.0)
    assert got is False
    subscribers = {s.port: pubsub_ids(s) - before[s.port] for s in masters5}
    assert any(subscribers.values()), "the waiter never subscribed"
    if api == "sync":
        assert notices_threads(), "no notices thread while the subscribers linger"

    def ended():
        # (the connections themselves: one that unsubscribed from everything is not "pubsub")
        return not notices_threads() and not any(
            subscribers[s.port] & {c["id"] for c in s.admin().client_list()} for s in masters5
        )

    wait_until(ended, NOTICES_LINGER_S + LINGER_MARGIN_S + 5, "the subscribers to end")
    took = time.monotonic() - last_wait
    assert took <= NOTICES_LINGER_S + LINGER_MARGIN_S, (
        f"the subscribers (and thread) ended {took:.2f} s after the last wait "
        f"(README: {NOTICES_LINGER_S} s)"
    )


# -- many waiters, one lock ------------------------------------------------------------------------


def test_many_waiters_one_lock_never_overlap(api, make_redlock, masters5, key):
    """8 waiters x 20 acquisitions of one name, woken by each other's releases (retry_delay 5 s:
    without notices they would mostly time out): a release wakes every waiter at once and their
    attempts collide, yet never two are inside at once, and every acquire succeeds."""
    rl = waiting_client(make_redlock, masters5, retry_delay=5)
    guard = threading.Lock()
    inside = {"now": 0, "overlaps": 0, "sections": 0}

    def worker():
        lock = rl.lock(key, 10)
        refused = 0
        for _ in range(20):
            if not lock.acquire(timeout=30):
                refused += 1
                continue
            with guard:
                inside["now"] += 1
                inside["overlaps"] += inside["now"] > 1
            time.sleep(0.001)  # (a critical section long enough for a rival to run into it)
            with guard:
                inside["now"] -= 1
                inside["sections"] += 1
            lock.release()
        return refused

    workers = [InThread(worker) for _ in range(8)]
    refused = [w.result(120) for w in workers]
    assert refused == [0] * 8, f"acquisitions that timed out, per waiter: {refused}"
    assert inside["overlaps"] == 0, inside
    assert inside["sections"] == 160
    rl.close()
    for s in masters5:
        assert lock_keys(s) == [], f"port {s.port}: {lock_keys(s)}"


# -- semaphore -------------------------------------------------------------------------------------


@pytest.mark.parametrize("wake", [None, False], ids=["wake-default", "wake-False"])
def test_a_permit_release_wakes_a_semaphore_waiter(api, make_redlock, masters5, key, wake):
    """A waiter on a full semaphore is woken when a permit is released (the permits announce on
    the semaphore's channel) and gets that permit; semaphore(..., wake=False) sleeps through the
    release and gets it only with its last attempt, at its deadline."""
    holder_rl = make_redlock(urls(masters5), master_timeout=MT)
    open_connections(holder_rl)
    full = holder_rl.semaphore(key, 2, HOLD_TTL)
    held = [full.acquire(blocking=False) for _ in range(2)]
    assert all(p is not None for p in held)
    rl = waiting_client(make_redlock, masters5)
    timeout = WAIT_S if wake is None else 1.0
    sem = rl.semaphore(key, 2, HOLD_TTL, wake=wake)
    base = set_calls(masters5)
    waiter = Waiter(sem.acquire, timeout=timeout)
    if wake is None:
        wait_subscribed(masters5, key)
    else:  # its first attempt was refused everywhere: a SET NX per permit on every master
        wait_until(
            lambda: set_calls(masters5) >= base + 2 * len(masters5),
            5,
            "the waiter's first attempt refused by every master",
        )
    freed = held.pop()
    released = time.monotonic()
    freed.release()
    permit = waiter.join()
    assert permit is not None, "the waiter got no permit"
    assert permit.index == freed.index
    lag = waiter.t1 - released
    if wake is None:
        assert lag <= WOKEN_S, f"the permit came {lag:.2f} s after the release: no notice woke it"
    else:
        assert released - waiter.t0 < timeout / 2, "the release came too late to tell anything"
        assert waiter.t1 - waiter.t0 >= timeout, "something woke a semaphore made with wake=False"
        assert all(subscribers(s, key) == 0 for s in masters5)
    assert_on_quorum(masters5, permit.key, permit.token)
    permit.release()
    held[0].release()


# -- bad input -------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["yes", 1, None], ids=["str", "int", "None"])
def test_wake_must_be_a_bool(api, make_redlock, canary, bad):
    """wake is a flag: anything but True/False is refused with TypeError naming it, before any
    I/O; on a lock, None means "as the client says" and is accepted."""
    with pytest.raises(TypeError, match="wake"):
        make_redlock([canary.url], wake=bad)
    rl = make_redlock([canary.url])
    makers = {
        "lock": lambda: rl.lock("name", 5, wake=bad),
        "rlock": lambda: rl.rlock("name", 5, wake=bad),
        "semaphore": lambda: rl.semaphore("name", 2, 5, wake=bad),
        "synchronized": lambda: rl.synchronized("name", 5, wake=bad),
    }
    for what, make in makers.items():
        if bad is None:
            make()
            continue
        with pytest.raises(TypeError, match="wake") as info:
            make()
        assert "wake" in str(info.value), f"{what}: {info.value!r}"
    assert rl.wake is True and make_redlock([canary.url], wake=False).wake is False
    make_redlock.close()
    assert not canary.touched(), "the library connected to a master while refusing bad input"


# -- fork ------------------------------------------------------------------------------------------


@sync_only("os.fork()")
@pytest.mark.fork
def test_a_forked_child_is_woken_through_its_own_subscriber(api, make_redlock, masters5, key):
    """The parent's subscriber thread runs (a waiter of its own waits) when the child forks; the
    child's waiter gets its own subscriber and is woken by a release; the parent's subscriber
    is untouched by the child's and still wakes the parent's waiter."""
    key_a, key_b = key + ":parent", key + ":child"
    holder_rl = make_redlock(urls(masters5), master_timeout=MT)
    open_connections(holder_rl)
    holder_a, holder_b = holder_rl.lock(key_a, HOLD_TTL), holder_rl.lock(key_b, HOLD_TTL)
    assert holder_a.acquire(blocking=False) and holder_b.acquire(blocking=False)
    rl = waiting_client(make_redlock, masters5)
    lock_a = rl.lock(key_a, HOLD_TTL)
    parent_waiter = Waiter(lock_a.acquire, timeout=WAIT_S + 10)
    wait_subscribed(masters5, key_a, what="the parent's waiter")
    assert len(notices_threads()) == 1
    parent_subscribers = {s.port: pubsub_ids(s) for s in masters5}
    assert all(len(ids) == 1 for ids in parent_subscribers.values()), parent_subscribers

    def release_b_once_the_child_waits():
        wait_subscribed(masters5, key_b, what="the child's waiter")
        released = time.monotonic()
        holder_b.release()
        return released

    releaser = InThread(release_b_once_the_child_waits)

    def child() -> dict:
        lock_b = rl.lock(key_b, HOLD_TTL)
        got, _t0, t1 = timed(lock_b.acquire, timeout=WAIT_S)
        seen = {"got": got, "t1": t1, "threads": [t.name for t in notices_threads()]}
        if got:
            lock_b.release()
        rl.close()
        return seen

    seen = in_child(child, timeout=WAIT_S + 20)
    released_b = releaser.result(WAIT_S + 30)
    assert seen["got"] is True
    assert seen["t1"] - released_b <= WOKEN_S, "no notice woke the child's waiter"
    assert len(seen["threads"]) == 1, f"the child's notices threads: {seen['threads']}"
    # the child's subscribers are gone with it; the parent's are the same connections
    wait_until(
        lambda: {s.port: pubsub_ids(s) for s in masters5} == parent_subscribers,
        5,
        "the parent's subscriber connections alone",
    )
    assert not parent_waiter.done.is_set()
    released_a = time.monotonic()
    holder_a.release()
    assert_woken(parent_waiter, released_a, "the parent's waiter")
    lock_a.release()


# -- asyncio: the notices cost nothing while tasks wait ------------------------------------------

NOTICES_MODULE = "hiredlock.aio._notices"  # whose timers TimerLog keeps
MANY = 200


class TimerLog(asyncio.SelectorEventLoop):
    """An event loop that keeps the timers the code of one module schedules (call_later goes
    through call_at): how many ran, how many were scheduled, and the most pending at once."""

    def __init__(self, module: str) -> None:
        super().__init__()
        self.module = module
        self.entries: list[list] = []  # [handle, ran]
        self.scheduled = 0
        self.ran = 0
        self.most_pending = 0

    def call_at(self, when, callback, *args, context=None):
        if getattr(callback, "__module__", None) != self.module:
            return super().call_at(when, callback, *args, context=context)
        entry: list = [None, False]

        def run(*run_args):
            entry[1] = True
            self.ran += 1
            callback(*run_args)

        entry[0] = super().call_at(when, run, *args, context=context)
        self.entries.append(entry)
        self.scheduled += 1
        self.most_pending = max(self.most_pending, self.pending())
        return entry[0]

    def pending(self) -> int:
        self.entries = [e for e in self.entries if not e[1] and not e[0].cancelled()]
        return len(self.entries)


def library_client_ids(servers) -> dict[int, set[str]]:
    return {s.port: {c["id"] for c in s.foreign_clients()} for s in servers}


def new_client_ids(servers, since) -> dict[int, set[str]]:
    now = library_client_ids(servers)
    return {port: ids - since[port] for port, ids in now.items() if ids - since[port]}


@pytest.mark.each_value_once
@pytest.mark.parametrize("ending", ["waits-end", "aclose"])
def test_many_async_waiters_one_notices_timer(engine, masters5, key, ending):
    """200 tasks of one AsyncRedlock wait on 200 names held by others: the client's notices keep
    one timer at most pending (not one per name, nor one per waiting task: their retry timers
    included), and none runs while nothing but waiting happens.
    "waits-end": the waits are cancelled; the notices end on their own (subscribers closed, no
    timer). "aclose": aclose() right after the waits ended, while their channels are still
    subscribed: no timer is left, and no connection is opened to a master afterwards."""
    names = [f"{key}:{i}" for i in range(MANY)]
    for name in names:
        set_foreign(masters5, name)
    loop = TimerLog(NOTICES_MODULE)
    subscribers_before = {s.port: pubsub_ids(s) for s in masters5}

    def our_subscribers() -> dict[int, set[str]]:
        return {s.port: pubsub_ids(s) - subscribers_before[s.port] for s in masters5}

    async def main() -> None:
        rl = AsyncRedlock(urls(masters5), backend=engine, master_timeout=MT, retry_delay=SLOW_RETRY)
        locks = [rl.lock(name, HOLD_TTL) for name in names]
        tasks = [asyncio.create_task(lock.acquire()) for lock in locks]
        channels = [channel(name) for name in names]
        deadline = time.monotonic() + 30
        while not all(
            count == 1 for s in masters5 for _, count in s.admin().pubsub_shardnumsub(*channels)
        ):
            assert time.monotonic() < deadline, "the waiters did not all subscribe in 30 s"
            await asyncio.sleep(0.05)
        assert all(lock.last_votes for lock in locks) and not any(t.done() for t in tasks)
        # Only waiting: no timer of the notices runs (or is scheduled) for a second.
        scheduled, ran = loop.scheduled, loop.ran
        await asyncio.sleep(1.0)
        assert (loop.scheduled - scheduled, loop.ran - ran) == (0, 0), (
            f"while {MANY} tasks waited, the notices scheduled {loop.scheduled - scheduled} "
            f"timers and ran {loop.ran - ran} in 1 s"
        )
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if ending == "aclose":
            await rl.aclose()
            assert loop.pending() == 0, f"{loop.pending()} notices timers pending after aclose()"
            opened = library_client_ids(masters5)
            # (the channels would have lingered 2 s, the connections 2 s more)
            await asyncio.sleep(4.5)
            assert loop.pending() == 0, f"{loop.pending()} notices timers pending after aclose()"
            assert not new_client_ids(masters5, opened), (
                f"connections opened after aclose(): {new_client_ids(masters5, opened)}"
            )
        else:
            deadline = time.monotonic() + 10
            while loop.pending() or any(our_subscribers().values()):
                assert time.monotonic() < deadline, (
                    f"10 s after the waits ended: {loop.pending()} notices timers pending, "
                    f"subscribers {our_subscribers()}"
                )
                await asyncio.sleep(0.05)
            quiet = library_client_ids(masters5)
            scheduled = loop.scheduled
            await asyncio.sleep(1.0)
            assert loop.scheduled == scheduled, "the notices scheduled a timer with no waiter"
            assert not new_client_ids(masters5, quiet), "a connection was opened with no waiter"
            await rl.aclose()
            assert loop.pending() == 0

    try:
        loop.run_until_complete(asyncio.wait_for(main(), 120))
    finally:
        loop.close()
    assert loop.most_pending <= 1, (
        f"the notices had {loop.most_pending} timers pending at once for {MANY} waiting tasks"
    )
    for name in names:
        assert values(masters5, name) == [FOREIGN] * len(masters5)


def test_aclose_ends_the_waits_at_once(engine, masters5, key, run_async):  # noqa: F811
    """Tasks waiting for a notice (their retry timers 10 to 30 s away) when aclose() is called
    stop waiting then: their acquires raise HiredlockError well before any timer, and hold
    nothing."""
    names = [f"{key}:{i}" for i in range(3)]
    for name in names:
        set_foreign(masters5, name)
    subscribers_before = {s.port: pubsub_ids(s) for s in masters5}

    async def main() -> list:
        rl = AsyncRedlock(urls(masters5), backend=engine, master_timeout=MT, retry_delay=SLOW_RETRY)
        locks = [rl.lock(name, HOLD_TTL) for name in names]
        tasks = [asyncio.create_task(lock.acquire()) for lock in locks]
        deadline = time.monotonic() + 10
        while not all(subscribers(s, name) == 1 for s in masters5 for name in names):
            assert time.monotonic() < deadline, "the waiters did not subscribe in 10 s"
            await asyncio.sleep(0.05)
        await rl.aclose()
        done, _pending = await asyncio.wait(tasks, timeout=WAIT_S)
        assert len(done) == len(tasks), "aclose() left acquires waiting for their timers"
        return [task.exception() for task in tasks]

    errors = run_async(main())
    assert all(isinstance(error, HiredlockError) for error in errors), errors
    for name in names:
        assert values(masters5, name) == [FOREIGN] * len(masters5)
    wait_until(
        lambda: all(pubsub_ids(s) <= subscribers_before[s.port] for s in masters5),
        5,
        "no subscriber connection left after aclose()",
    )
