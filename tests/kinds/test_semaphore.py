"""Semaphores: Redlock.semaphore(name, permits, ttl) allows at most `permits` holders of `name` at
a time, across every client. Permit i is a lock on its own key, `hiredlock:permit:<i>:<name>`.

On both engines and both APIs (support/apis.py's facade gives an AsyncSemaphore the Semaphore's
shape: acquire() and `with` run in the calling thread's task), except where threads or a signal
handler are the subject. The acceptance test runs 10 holders in 4 processes and counts them on a
separate judge redis-server; the kill test SIGKILLs a process holding two permits."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
import time

import pytest
from apis import make_redlock_fixture, pytest_generate_tests, sync_only, timed  # noqa: F401
from features_support import (  # noqa: F401  (the leakcheck fixture)
    MT,
    SLACK,
    leakcheck_fixture,
    lock_keys,
)
from support import (
    EXTRA_SLACK,
    SUPPORT_DIR,
    TOKEN_RE,
    assert_no_key,
    assert_pttl_between,
    assert_values,
    braced,
    open_connections,
    urls,
    values,
    wait_until,
)

import hiredlock
import hiredlock.aio
from hiredlock import LockNotAcquired, Outcome

WORKER = os.path.join(SUPPORT_DIR, "_semaphore_worker.py")


def permit_key(name: str, index: int) -> bytes:
    """The documented key of permit `index`: hiredlock:permit:<index>:{<name>}."""
    return b"hiredlock:permit:%d:%s" % (index, braced(name))


def assert_no_permit_keys(servers, name, permits, msg=""):
    for i in range(permits):
        assert_no_key(servers, permit_key(name, i), msg)


def taken_votes(votes, n_masters):
    """How many of `votes` say TAKEN (one vote per master; the others may only be SKIPPED: a
    round stops waiting once a majority refused)."""
    assert len(votes) == n_masters, votes
    assert all(vote.outcome in (Outcome.TAKEN, Outcome.SKIPPED) for vote in votes), votes
    return sum(vote.outcome == Outcome.TAKEN for vote in votes)


def unwrap(obj):
    """The library object behind the async facade (the object itself on the sync API)."""
    return getattr(obj, "_target", obj)


# -- 1. permits, keys, refusal, a permit coming back ----------------------------------------------


def test_three_permits_on_five_masters(api, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    open_connections(rl)  # every master gets every SET (a round ends on a quorum)
    sem = rl.semaphore(key, 3, 30)
    if api == "sync":
        assert type(sem) is hiredlock.Semaphore
    else:
        assert type(unwrap(sem)) is hiredlock.aio.AsyncSemaphore
    assert sem.permits == 3 and sem.name == key and sem.held == []

    got = [sem.acquire(blocking=False) for _ in range(3)]
    assert all(p is not None for p in got), got
    for p in got:
        if api == "sync":
            assert type(p) is hiredlock.Permit and isinstance(p, hiredlock.Lock)
        else:
            assert type(unwrap(p)) is hiredlock.aio.AsyncPermit
            assert isinstance(unwrap(p), hiredlock.aio.AsyncLock)
    assert {p.index for p in got} == {0, 1, 2}
    assert len({p.token for p in got}) == 3
    assert {id(unwrap(p)) for p in sem.held} == {id(unwrap(p)) for p in got}
    for p in got:
        assert p.held and 0 < p.validity <= 30
        assert TOKEN_RE.match(p.token), p.token
        assert p.key == permit_key(key, p.index)
        assert_values(masters5, p.key, p.token)  # on every master, not just a quorum
        assert_pttl_between(masters5, p.key, 25_000, 30_000)
    assert all(v is None for v in values(masters5, key)), "the bare name must not be a key"

    # All three held through this object: a fourth from it gets none (nothing left to try) ...
    assert sem.acquire(blocking=False) is None
    # ... and one through another client is refused by the masters: TAKEN everywhere.
    other = make_redlock(urls(masters5))
    open_connections(other)
    sem2 = other.semaphore(key, 3, 30)
    assert sem2.acquire(blocking=False) is None
    assert taken_votes(sem2.last_votes, 5) >= 3, sem2.last_votes
    assert sem2.held == []
    for p in got:  # the refused attempt unlocked what it set nowhere: ours are intact
        assert_values(masters5, p.key, p.token)

    # Releasing one lets the next acquire take that very permit.
    freed = got.pop(1)
    freed.release()
    assert not freed.held and freed.token is None
    assert_no_key(masters5, freed.key, "after release()")
    again = sem2.acquire(blocking=False)
    assert again is not None and again.index == freed.index
    assert_values(masters5, again.key, again.token)
    assert sem2.acquire(blocking=False) is None  # full again

    for p in [*got, again]:
        p.release()
    assert sem.held == [] and sem2.held == []
    assert_no_permit_keys(masters5, key, 3, "after every permit was released")
    assert all(not lock_keys(m) for m in masters5), [lock_keys(m) for m in masters5]


def test_permit_is_a_lock_extend_and_release_twice(api, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    open_connections(rl)
    sem = rl.semaphore(key, 2, 2)
    permit = sem.acquire(blocking=False)
    assert permit is not None
    permit.extend(30)
    assert permit.extensions == 1 and permit.validity > 25
    assert_pttl_between(masters5, permit.key, 25_000, 30_000)
    permit.release()
    with pytest.raises(hiredlock.NotHeld):
        permit.release()
    assert_no_permit_keys(masters5, key, 2)


# -- 2. `with semaphore` ---------------------------------------------------------------------------


def test_with_nests_and_releases_in_order(api, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    sem = rl.semaphore(key, 2, 30, blocking_timeout=0.2)
    with sem as outer:
        assert outer.held
        with sem as inner:
            assert inner.held and inner.index != outer.index
            # both permits are held: a third never comes
            with pytest.raises(LockNotAcquired), sem:
                pytest.fail("the body ran without a permit")
            assert outer.held and inner.held
        assert not inner.held and outer.held, "leaving the inner block released the wrong one"
        assert_no_key(masters5, inner.key, "after the inner block")
        assert sum(v == outer.token.encode() for v in values(masters5, outer.key)) >= 3
    assert not outer.held
    assert_no_permit_keys(masters5, key, 2, "after the blocks")


def test_with_releases_when_the_body_raises(api, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    sem = rl.semaphore(key, 1, 30)

    class BodyError(Exception):
        pass

    with pytest.raises(BodyError), sem as permit:
        assert permit.held
        raise BodyError
    assert not permit.held
    assert_no_permit_keys(masters5, key, 1)


@sync_only("threads sharing one Semaphore object")
def test_three_threads_in_with_fourth_refused(api, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5), retry_delay=0.02)
    sem = rl.semaphore(key, 3, 30, blocking_timeout=10)
    inside = threading.Barrier(4, timeout=30)  # three holders and the test
    leave = threading.Event()
    seen: dict[str, object] = {}
    errors: list[BaseException] = []

    def holder(n):
        try:
            with sem as permit:
                seen[f"t{n}"] = permit
                inside.wait()
                assert leave.wait(30)
                assert permit.held, "the permit was not held to the end of the block"
        except BaseException as exc:
            errors.append(exc)
            inside.abort()

    threads = [threading.Thread(target=holder, args=(n,)) for n in range(3)]
    for t in threads:
        t.start()
    try:
        inside.wait()  # all three are inside their `with` at the same time
        permits = list(seen.values())
        assert len(permits) == 3 and {p.index for p in permits} == {0, 1, 2}
        assert len(sem.held) == 3
        for p in permits:
            assert sum(v == p.token.encode() for v in values(masters5, p.key)) >= 3

        # The same object has nothing left to try; another client's masters say TAKEN.
        assert sem.acquire(blocking=False) is None
        other = make_redlock(urls(masters5), retry_delay=0.02)
        fourth = other.semaphore(key, 3, 30, blocking_timeout=0.3)
        t0 = time.monotonic()
        with pytest.raises(LockNotAcquired) as caught, fourth:
            pytest.fail("a fourth holder got in")
        elapsed = time.monotonic() - t0
        assert 0.3 <= elapsed < 0.3 + 1.0 + EXTRA_SLACK, elapsed
        # The holders took their permits at the same moment, so a master may have one free
        # (a permit is held by a quorum, not by every master): no permit had a quorum for the
        # fourth, whose votes are a lock's for the permit most masters gave it.
        votes = caught.value.votes
        assert sum(vote.outcome == Outcome.OK for vote in votes) < 3, votes
        assert sum(vote.outcome == Outcome.TAKEN for vote in votes) >= 1, votes
    finally:
        leave.set()
        for t in threads:
            t.join(30)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)
    assert sem.held == []
    assert_no_permit_keys(masters5, key, 3, "after the threads' blocks")


# -- 3. acceptance: at most `permits` holders, 10 workers in 4 processes --------------------------

ACCEPT_PERMITS = 3
ACCEPT_WORKERS = [3, 3, 2, 2]  # 10 workers in 4 processes
ACCEPT_SECONDS = 3.0
ACCEPT_TTL = 5.0


def run_semaphore_workers(api, engine, masters, judge, name):
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    env = {k: v for k, v in os.environ.items() if k != "HIREDLOCK_IMPL"}
    procs = []
    try:
        for workers in ACCEPT_WORKERS:
            args = [sys.executable, WORKER, "--api", api, "--engine", engine]
            args += ["--judge", judge.url, "--name", name, "--permits", str(ACCEPT_PERMITS)]
            args += ["--ttl", str(ACCEPT_TTL), "--workers", str(workers)]
            args += ["--duration", str(ACCEPT_SECONDS), "--ready", str(ready_w)]
            args += ["--go", str(go_r), *urls(masters)]
            procs.append(
                subprocess.Popen(
                    args,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    pass_fds=(ready_w, go_r),
                    env=env,
                )
            )
        os.close(ready_w)
        ready_w = None
        got = b""
        deadline = time.monotonic() + 60
        while len(got) < len(procs):  # all imported and connected: start together
            r, _, _ = select.select([ready_r], [], [], max(0.0, deadline - time.monotonic()))
            assert r, "workers did not become ready"
            chunk = os.read(ready_r, 16)
            assert chunk, "a worker died before it was ready: " + " | ".join(
                p.stderr.read().decode()[-2000:] for p in procs if p.poll() is not None
            )
            got += chunk
        os.write(go_w, b"g" * len(procs))
        results = []
        for p in procs:
            # bounded: the duration, plus one acquire timeout for a worker that began one late
            out, err = p.communicate(timeout=ACCEPT_SECONDS + 30)
            assert p.returncode == 0, err.decode()[-3000:]
            results.append(json.loads(out.decode().strip().splitlines()[-1]))
        return results
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for fd in (ready_r, ready_w, go_r, go_w):
            if fd is not None:
                os.close(fd)


@pytest.mark.each_value_once
@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize("worker_api", ["sync", "async"])
def test_at_most_three_holders_10_workers_4_processes(worker_api, engine, masters5, key, capsys):
    """(worker_api, not api: the workers' API, outside the facade.)"""
    masters, judge = masters5[:3], masters5[4]
    t0 = time.monotonic()
    results = run_semaphore_workers(worker_api, engine, masters, judge, key)
    elapsed = time.monotonic() - t0
    errors = [e for r in results for e in r["errors"]]
    summary = [{k: v for k, v in r.items() if k != "errors"} for r in results]
    with capsys.disabled():
        print(f"\n[{worker_api}-{engine}] semaphore 3 permits, 10 workers / 4 processes: {summary}")
    assert not errors, f"{summary}: {errors[:5]}"
    assert sum(r["late"] for r in results) == 0, summary  # (ttl 5 s, holds of ~2 ms)
    assert sum(r["lost"] for r in results) == 0, summary
    successes = sum(r["successes"] for r in results)
    assert successes >= 30, f"too few acquisitions to prove anything: {summary}"
    top = max(r["max_occupancy"] for r in results)
    assert top <= ACCEPT_PERMITS, f"{top} holders at once with {ACCEPT_PERMITS} permits: {summary}"
    assert top == ACCEPT_PERMITS, f"occupancy never reached {ACCEPT_PERMITS}: {summary}"
    assert max(r["max_per_index"] for r in results) == 1, f"two holders of one permit: {summary}"
    assert set().union(*(r["indices"] for r in results)) == {0, 1, 2}, summary
    a = judge.admin()
    assert int(a.get("occupancy")) == 0, "an INCR without its DECR"
    assert_no_permit_keys(masters, key, ACCEPT_PERMITS, "after the workers' exit")
    assert all(not lock_keys(m) for m in masters), [lock_keys(m) for m in masters]
    assert elapsed < ACCEPT_SECONDS + 30 + EXTRA_SLACK


# -- 4. a killed holder's permits come back after their ttl ---------------------------------------

KILL_TTL = 1.0

HOLDER = """
import sys
import hiredlock
engine, name, ttl, *masters = sys.argv[1:]
rl = hiredlock.Redlock(masters, backend=engine)
sem = rl.semaphore(name, 2, float(ttl))
got = [sem.acquire(blocking=False) for _ in range(2)]
print(" ".join("-" if p is None else str(p.index) for p in got), flush=True)
sys.stdin.read()  # held until killed (no auto_renew: the permits expire with their ttl)
"""


def test_killed_holders_permits_come_back_after_ttl(api, engine, make_redlock, masters5, key):
    env = {k: v for k, v in os.environ.items() if k != "HIREDLOCK_IMPL"}
    t_spawn = time.monotonic()
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER, engine, key, str(KILL_TTL), *urls(masters5)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        ready, _, _ = select.select([child.stdout], [], [], 60)
        assert ready, "the holder process did not report"
        line = child.stdout.readline().decode().strip()
        t_held = time.monotonic()  # the child's SETs happened before this
        assert line, child.stderr.read().decode()[-2000:]
        assert sorted(line.split()) == ["0", "1"], f"the holder did not take both permits: {line}"
        for i in range(2):  # really held on a quorum, the holder still alive
            present = [v is not None for v in values(masters5, permit_key(key, i))]
            assert sum(present) >= 3, f"permit {i} not held on a quorum: {present}"
        child.kill()
        child.wait(10)
        assert child.returncode == -signal.SIGKILL
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        child.stdin.close()
        child.stdout.close()
        child.stderr.close()

    rl = make_redlock(urls(masters5), retry_delay=0.02)
    sem = rl.semaphore(key, 2, 30)
    bound = KILL_TTL + 1.0 + EXTRA_SLACK
    got = []
    for _ in range(2):
        permit, _t0, t1 = timed(sem.acquire, timeout=bound + 1.0)
        assert permit is not None, f"a permit did not come back: {sem.last_votes}"
        # It cannot come back before its key expired (the holder's SET came after t_spawn) ...
        assert t1 >= t_spawn + KILL_TTL - 0.05, (t1 - t_spawn, KILL_TTL)
        # ... and comes back within the ttl (plus slack) of when the holder was known to hold it.
        assert t1 - t_held <= bound, (t1 - t_held, bound)
        got.append(permit)
    assert {p.index for p in got} == {0, 1}
    for p in got:
        assert sum(v == p.token.encode() for v in values(masters5, p.key)) >= 3
        p.release()
    assert_no_permit_keys(masters5, key, 2)


# -- 5. auto_renew ---------------------------------------------------------------------------------

RENEW_TTL = 1.0


def test_auto_renew_keeps_a_permit_past_its_ttl(api, make_redlock, masters5, key, leakcheck):
    rl = make_redlock(urls(masters5), master_timeout=MT)
    sem = rl.semaphore(key, 1, RENEW_TTL, auto_renew=True)
    other = make_redlock(urls(masters5), master_timeout=MT)
    rival = other.semaphore(key, 1, RENEW_TTL)
    permit = sem.acquire(blocking=False)
    assert permit is not None
    token = permit.token
    t0 = time.monotonic()
    # Held through 2.5 ttls: sampled on the masters, and the rival is refused all along.
    while time.monotonic() - t0 < 2.5 * RENEW_TTL:
        assert permit.held and not permit.lost.is_set(), time.monotonic() - t0
        held_on = sum(v == token.encode() for v in values(masters5, permit.key))
        assert held_on >= 3, f"at {time.monotonic() - t0:.2f}s held on {held_on} masters only"
        assert rival.acquire(blocking=False) is None, "a rival got the only permit"
        time.sleep(0.1)
    # A key set with a 1 s expiry, still ours after 2.5 s (same token, the rival refused all
    # along): it was extended, and it is still armed for at most one ttl.
    assert permit.token == token
    assert_pttl_between(masters5, permit.key, 0, RENEW_TTL * 1000)
    permit.release()
    assert not permit.held
    assert_no_permit_keys(masters5, key, 1, "after release()")
    # after the release, the rival gets it at once
    taken = rival.acquire(blocking=False)
    assert taken is not None
    taken.release()
    leakcheck.close_and_check(rl, other)


# -- 6. bad input, before any I/O ------------------------------------------------------------------


def refused(fn, exc_type, naming, canary):
    with pytest.raises(exc_type) as caught:
        fn()
    assert naming in str(caught.value), f"{caught.value!r} does not name {naming!r}"
    assert not canary.touched(), "the library connected to a master while refusing bad input"


@pytest.mark.parametrize(
    ("permits", "exc_type"),
    [
        pytest.param(0, ValueError, id="zero"),
        pytest.param(-1, ValueError, id="negative"),
        pytest.param(1001, ValueError, id="over-1000"),
        pytest.param(10**9, ValueError, id="huge"),
        pytest.param("3", TypeError, id="str"),
        pytest.param(True, TypeError, id="bool"),
        pytest.param(3.0, TypeError, id="float"),
        pytest.param(None, TypeError, id="none"),
    ],
)
def test_bad_permits(api, make_redlock, canary, permits, exc_type):
    rl = make_redlock([canary.url])
    refused(lambda: rl.semaphore("name", permits, 10), exc_type, "permits", canary)


@pytest.mark.parametrize(
    "name",
    [
        "hiredlock:permit:0:x",
        "hiredlock:permit:",
        b"hiredlock:permit:1:x",
        "hiredlock:fence:x",
        b"hiredlock:fence:",
    ],
)
def test_reserved_names_refused(api, make_redlock, canary, name):
    rl = make_redlock([canary.url])
    refused(lambda: rl.semaphore(name, 3, 10), ValueError, "hiredlock:", canary)
    refused(lambda: rl.lock(name, 10), ValueError, "hiredlock:", canary)


@pytest.mark.parametrize(
    ("call", "exc_type", "naming"),
    [
        pytest.param(lambda rl: rl.semaphore("", 3, 10), ValueError, "name", id="empty-name"),
        pytest.param(lambda rl: rl.semaphore(5, 3, 10), TypeError, "name", id="int-name"),
        pytest.param(lambda rl: rl.semaphore("n", 3, 0), ValueError, "ttl", id="zero-ttl"),
        pytest.param(lambda rl: rl.semaphore("n", 3, "1"), TypeError, "ttl", id="str-ttl"),
        pytest.param(
            lambda rl: rl.semaphore("n", 3, 10, blocking_timeout=-1),
            ValueError,
            "blocking_timeout",
            id="negative-blocking_timeout",
        ),
        pytest.param(
            lambda rl: rl.semaphore("n", 3, 10, on_lost=5), TypeError, "on_lost", id="on_lost"
        ),
        pytest.param(
            lambda rl: rl.semaphore("n", 3, 10, max_hold=5),
            ValueError,
            "max_hold",
            id="max_hold-without-auto_renew",
        ),
        pytest.param(
            lambda rl: rl.semaphore("n", 3, 10).acquire(blocking=False, timeout=1),
            ValueError,
            "timeout",
            id="acquire-timeout-not-blocking",
        ),
        pytest.param(
            lambda rl: rl.semaphore("n", 3, 10).acquire(timeout=-1),
            ValueError,
            "timeout",
            id="acquire-negative-timeout",
        ),
        pytest.param(
            lambda rl: rl.semaphore("n", 3, 10).acquire(blocking="yes"),
            TypeError,
            "blocking",
            id="acquire-str-blocking",
        ),
    ],
)
def test_bad_arguments_refused(api, make_redlock, canary, call, exc_type, naming):
    rl = make_redlock([canary.url])
    refused(lambda: call(rl), exc_type, naming, canary)


def test_good_bounds_make_no_io(api, make_redlock, canary):
    rl = make_redlock([canary.url])
    assert rl.semaphore("n", 1, 10).permits == 1
    assert rl.semaphore("n", 1000, 10).permits == 1000
    assert not canary.touched(), "making a semaphore connected to a master"


# -- 7. a blocking acquire on a full semaphore gives up at its timeout -----------------------------


def test_blocking_acquire_on_full_semaphore_times_out(api, make_redlock, masters5, key):
    holder = make_redlock(urls(masters5))
    open_connections(holder)  # every master holds the permits: the waiter's votes are TAKEN
    full = holder.semaphore(key, 2, 30)
    held = [full.acquire(blocking=False) for _ in range(2)]
    assert all(p is not None for p in held)
    rl = make_redlock(urls(masters5), retry_delay=0.05)
    sem = rl.semaphore(key, 2, 30, blocking_timeout=0.4)

    for kwargs, wait in (({"timeout": 0.5}, 0.5), ({}, 0.4)):  # timeout, then blocking_timeout
        permit, t0, t1 = timed(sem.acquire, **kwargs)
        assert permit is None
        assert wait <= t1 - t0 < wait + SLACK + 0.5, (kwargs, t1 - t0)
        assert taken_votes(sem.last_votes, 5) >= 3, sem.last_votes
    assert sem.held == []
    for p in held:  # the waiter's attempts unlocked nothing of the holder's
        assert sum(v == p.token.encode() for v in values(masters5, p.key)) >= 3

    # A waiter with time left gets the permit once one is released.
    held.pop().release()
    permit = sem.acquire(timeout=5)
    assert permit is not None
    permit.release()
    held[0].release()
    assert_no_permit_keys(masters5, key, 2)


# -- fencing, and an interrupt among threads ----------------------------------------------------


def test_fencing_is_refused_for_permits(api, make_redlock, canary, key):
    """A fence orders the holders of one name; permits are held side by side: refused before
    any I/O rather than accepted and ignored."""
    rl = make_redlock([canary.url])
    with pytest.raises(ValueError, match="fencing"):
        rl.semaphore(key, 2, 10, fencing=True)
    assert not canary.touched()


@sync_only("a signal handler interrupts the main thread's blocking acquire")
def test_interrupted_acquire_keeps_another_threads_permit(api, make_redlock, masters5, key):
    class Interrupt(Exception):
        pass

    def interrupt(signum, frame):
        raise Interrupt

    holder = make_redlock(urls(masters5))
    open_connections(holder)
    full = holder.semaphore(key, 2, 30)
    held = [full.acquire(blocking=False) for _ in range(2)]
    assert all(p is not None for p in held)
    for p in held:  # every SET of the holder has landed before the count below starts
        assert_values(masters5, p.key, p.token)
    # retry_delay 5 s, no release notices: the main thread's acquire pauses 2.5..7.5 s after its
    # first attempt, and the release below does not wake it.
    rl = make_redlock(urls(masters5), retry_delay=5, wake=False)
    open_connections(rl)
    sem = rl.semaphore(key, 2, 30)

    def set_calls():
        return sum(
            int(m.admin().info("commandstats").get("cmdstat_set", {}).get("calls", 0))
            for m in masters5
        )

    base = set_calls()
    out: dict[str, object] = {}

    def other_thread():
        try:
            deadline = time.monotonic() + 10
            while set_calls() < base + 2 * 5:  # the first attempt went out
                assert time.monotonic() < deadline, "the main thread's attempt never went out"
                time.sleep(0.005)
            held.pop().release()
            out["permit"] = sem.acquire(blocking=False)  # the main thread is in its pause
        finally:
            os.kill(os.getpid(), signal.SIGUSR1)

    previous = signal.signal(signal.SIGUSR1, interrupt)
    t = threading.Thread(target=other_thread)
    try:
        t.start()
        with pytest.raises(Interrupt):
            sem.acquire(timeout=30)
    finally:
        t.join(30)
        signal.signal(signal.SIGUSR1, previous)
    theirs = out.get("permit")
    assert theirs is not None, "the other thread got no permit"
    try:
        assert theirs.held, "the interrupted acquire forgot another thread's permit"
        present = sum(v == theirs.token.encode() for v in values(masters5, theirs.key))
        assert present >= 3, "the interrupted acquire unlocked another thread's permit"
    finally:
        if theirs.held:
            theirs.release()
        held[0].release()


# -- a permit object per holder, and acquirers that do not shut each other out -------------------


def test_a_late_release_does_not_free_the_next_holders_permit(api, make_redlock, masters5, key):
    """Holder A overruns its permit's ttl; B, sharing the semaphore object, gets the permit: a
    permit object of its own. A's late release() is refused (LockLost) and lets go of nothing of
    B's: B holds on, and another client still finds the only permit taken."""
    rl = make_redlock(urls(masters5))
    open_connections(rl)
    sem = rl.semaphore(key, 1, 0.3)
    a = sem.acquire(blocking=False)
    assert a is not None
    a_key, a_token = a.key, a.token
    wait_until(lambda: not a.held, 5 + EXTRA_SLACK, "A's validity to run out")
    wait_until(
        lambda: all(v is None for v in values(masters5, a_key)),
        5 + EXTRA_SLACK,
        "A's key to expire",
    )
    b = sem.acquire(timeout=5)
    assert b is not None and unwrap(b) is not unwrap(a), "one permit object for two holders"
    assert b.key == a_key and b.token != a_token
    with pytest.raises(hiredlock.LockLost):
        a.release()
    assert b.held
    assert_values(masters5, b.key, b.token)
    other = make_redlock(urls(masters5))
    assert other.semaphore(key, 1, 0.3).acquire(blocking=False) is None
    b.release()
    assert_no_key(masters5, b.key)


@sync_only("two threads acquire at the same moment")
def test_acquirers_at_the_same_moment_both_get_a_permit(api, make_redlock, masters5, key):
    """Two clients ask at once for a permit of a semaphore with 10 free: both get one (an
    attempt takes one permit per master, from a few in a random order, and does not hold the
    others while it decides)."""
    clients = [make_redlock(urls(masters5)) for _ in range(2)]
    for rl in clients:
        open_connections(rl)
    sems = [rl.semaphore(key, 10, 10) for rl in clients]
    trials, both = 30, 0
    for _ in range(trials):
        start = threading.Barrier(2, timeout=30)
        got: list = [None, None]

        def take(i, start=start, got=got):
            start.wait()
            got[i] = sems[i].acquire(blocking=False)

        threads = [threading.Thread(target=take, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        both += all(p is not None for p in got)
        for p in got:
            if p is not None:
                p.release()
    # (two acquirers whose first choices meet can both miss once in a while: they retry)
    assert both >= trials * 0.8, f"both got a permit in {both} of {trials} trials"
    for i in range(10):
        assert_no_key(masters5, permit_key(key, i))


@sync_only("one thread releases while another acquires")
def test_a_permit_being_released_is_tried_after_the_free_ones(api, make_redlock, masters5, key):
    """Threads sharing a semaphore of 2 on two masters (a quorum is both): one thread lets go of
    its permit, and while that release is on its way to the masters another thread asks for a
    permit without blocking. The release may have reached one master and not the other; an
    attempt that tried the permit being released first would find it free on one master and
    taken on the other, the masters would take different permits, and the attempt would fail
    with a permit free everywhere. The object knows which release is under way: that permit is
    tried last, and every trial gets a permit."""
    servers = masters5[:2]
    rl = make_redlock(urls(servers))
    open_connections(rl)
    semaphore = rl.semaphore(key, 2, 10)
    trials, refused = 40, 0
    for _ in range(trials):
        first = semaphore.acquire(blocking=False)
        assert first is not None
        releasing = threading.Thread(target=first.release)
        releasing.start()
        wait_until(lambda first=first: not first.held, 30, "the first permit is let go")
        second = semaphore.acquire(blocking=False)
        releasing.join(30)
        if second is None:
            refused += 1
        else:
            second.release()
    assert refused == 0, f"refused in {refused} of {trials} trials with a permit free everywhere"
    assert_no_permit_keys(servers, key, 2)
