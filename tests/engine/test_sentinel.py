"""Sentinel-managed masters (support/sentinels.py: a master, its replica and three sentinels, real
processes): given as a redis+sentinel:// URL, a dict or a redis-py Sentinel client, a group is one
master of a Redlock, wherever the sentinels say it is now.

* as one of three masters, on both APIs: acquire, extend, release reach the group's current master;
  votes and inspect() name it redis+sentinel://<sentinels>/<service>/<db>;
* a forced failover (SENTINEL FAILOVER) during acquire/release cycles: every cycle succeeds (the
  two plain masters are a quorum), none takes longer than its timeout allows, and the group's
  vote comes back OK, with our key on the new master (after a forced failover the old master
  stays a writable master until the sentinels demote it, about 10 s later; its READONLY then
  sends the library back to the sentinels);
* a service name no sentinel knows, or no sentinel answering: the group votes CONN_ERROR with the
  reason, at no cost to the rounds;
* the sentinels stopped while the group's master is up: the master they last named keeps serving,
  clients made before and during the outage, until the stale lifetime of that answer ends; then
  the sentinels' failure is the group's vote;
* bad input is refused (ValueError naming masters[i]) before any I/O.
"""

from __future__ import annotations

import collections
import math
import threading
import time
import uuid

import pytest
from apis import api_fixture, both_apis, make_redlock_fixture, timed  # noqa: F401
from sentinels import (  # noqa: F401  (fixtures)
    fresh_sentinel_group_fixture,
    sentinel_group_fixture,
    sentinel_group_session_fixture,
)
from servers import free_port
from support import (
    EXTRA_SLACK,
    assert_foreign_intact,
    assert_no_key,
    assert_pttl_between,
    assert_values,
    attempt_votes,
    open_connections,
    set_foreign,
    wait_until,
)

from hiredlock import Outcome, QuorumUnreachable
from hiredlock._engines import resolver as _resolver
from hiredlock._engines.sentinel import SENTINEL_TIMEOUT_S

TTL = 10.0
# Generous for a loaded machine: the first round may wait (this long at most) for the group's
# first lookup, three loopback round trips to the sentinels.
MASTER_TIMEOUT = 0.5
QUICK = MASTER_TIMEOUT + 1.0 + EXTRA_SLACK  # any one call, lookups never on its clock beyond that

FORMS = ["url", "dict", "master_for", "sentinel_dict"]


def group_master(group, form):
    """The group as the library is given it, in one of FORMS."""
    if form == "url":
        return group.url()
    if form == "dict":
        return group.as_dict(db=0)
    if form == "master_for":
        return group.redis_py_sentinel().master_for(group.service_name)
    assert form == "sentinel_dict", form
    return {"sentinel": group.redis_py_sentinel(), "service_name": group.service_name}


def check_quick(result_t0_t1, what):
    result, t0, t1 = result_t0_t1
    assert t1 - t0 < QUICK, f"{what} took {t1 - t0:.3f} s (bound {QUICK} s)"
    return result


# -- the group as one master of three -------------------------------------------------------------


@both_apis
@pytest.mark.parametrize("form", FORMS)
def test_group_is_one_master(engine, api, sentinel_group, masters5, make_redlock, key, form):
    group = sentinel_group
    plain = masters5[:2]
    rl = make_redlock(
        [plain[0].url, group_master(group, form), plain[1].url], master_timeout=MASTER_TIMEOUT
    )
    assert str(rl.masters[1]) == group.name(), rl.masters
    master = group.master
    lock = rl.lock(key, TTL)

    assert check_quick(timed(lock.acquire, blocking=False), "acquire") is True
    # (eventually: the round may have ended on a quorum before the group's master answered)
    assert_values([plain[0], master, plain[1]], key, lock.token)
    states = rl.inspect(key)
    assert [s.outcome for s in states] == [Outcome.OK] * 3, states
    assert states[1].master == group.name()
    assert states[1].ours is True, states[1]

    master.admin().pexpire(key, 3000)  # extend must bring the group master's expiry back up
    check_quick(timed(lock.extend), "extend")
    assert_pttl_between([master], key, 3000, int(TTL * 1000))

    check_quick(timed(lock.release), "release")
    assert_no_key([plain[0], master, plain[1]], key)

    # A name held on plain[0] and on the group's master: the group's vote is TAKEN (it cannot
    # be skipped: plain[1] is free, so the round needs the group's answer), which only the
    # group's current master could have said.
    holder = f"{key}:held"
    set_foreign([plain[0], master], holder)
    refused = rl.lock(holder, TTL)
    assert check_quick(timed(refused.acquire, blocking=False), "refused acquire") is False
    votes = refused.last_votes
    assert votes[0].outcome == Outcome.TAKEN and votes[1].outcome == Outcome.TAKEN, votes
    assert votes[2].outcome in (Outcome.OK, Outcome.SKIPPED), votes
    assert votes[1].master == group.name()
    assert_foreign_intact([plain[0], master], holder)
    assert_no_key([plain[1]], holder, "after the refused acquire was undone")


# -- a failover during acquire/release cycles ----------------------------------------------------

# The cycles' lock: a short ttl, because a copy of one of its own keys may block the new master
# for that long (below).
FAILOVER_TTL = 2.0
# How long, after the sentinels agree on the new master, the library may take to settle there.
# The old master stays a writable master until the sentinels demote it (about 10 s later), so
# READONLY alone would come too late: while rounds use a group, its master is asked of the
# sentinels again every second (_resolver.SENTINEL_ANSWER_LIFETIME_S) and compared with the
# connection's at most every 0.1 s. Then the new master may still hold a key of ours that was
# replicated to it before its promotion, whose release reached the old master only: it refuses
# our SET (TAKEN) until that key's ttl runs out. The rest is room for a busy machine.
SWITCH_BOUND = 1.0 + 0.1 + FAILOVER_TTL + 1.0 + EXTRA_SLACK
GOOD_RUN = 20  # consecutive cycles on the new master, voting OK, that end the run


class Cycles(threading.Thread):
    """acquire / inspect / release cycles on one lock, each recorded; stops after GOOD_RUN
    consecutive good cycles on the new master (once it is known), or when told to."""

    def __init__(self, rl, group, key):
        super().__init__(name="sentinel-cycles", daemon=True)
        self.rl, self.group, self.key = rl, group, key
        self.new_master = None  # set by the test once the sentinels agree
        self.switched_at = None
        self.warm = threading.Event()  # a few good cycles on the first master
        self.stop = threading.Event()
        self.records = []
        self.error = None

    def run(self):
        try:
            self._run()
        except BaseException as exc:
            self.error = exc
            self.warm.set()

    def _run(self):
        lock = self.rl.lock(self.key, FAILOVER_TTL)
        first = self.group.master
        good_run = warm = 0
        while not self.stop.is_set():
            new = self.new_master  # read once: this cycle counts for the new master or not
            t0 = time.monotonic()
            got = lock.acquire(blocking=False)
            t1 = time.monotonic()
            state = self.rl.inspect(self.key)[1] if got else None
            token = lock.token.encode() if got else None
            on = new if new is not None else first
            seen = on.admin().get(self.key) if got else None
            t2 = time.monotonic()
            if got:
                lock.release()
            t3 = time.monotonic()
            good = (
                got
                and state.outcome == Outcome.OK
                and state.ours is True
                and seen == token  # our key is on the master the sentinels name
            )
            self.records.append(
                {
                    "after_switch": new is not None,
                    "got": got,
                    "acquire_s": t1 - t0,
                    "release_s": t3 - t2,
                    "outcome": state.outcome if state else None,
                    "detail": state.detail if state else None,
                    "good": good,
                    "t": t3,
                }
            )
            if new is None:
                warm = warm + 1 if good else 0
                if warm >= 5:
                    self.warm.set()
                continue
            good_run = good_run + 1 if good else 0
            if good and self.switched_at is None:
                self.switched_at = t3
            if good_run >= GOOD_RUN:
                return


def test_failover_during_cycles(engine, fresh_sentinel_group, masters5, make_redlock, key):
    group = fresh_sentinel_group
    plain = masters5[:2]
    master_timeout = 0.1
    rl = make_redlock([plain[0].url, group.url(), plain[1].url], master_timeout=master_timeout)
    old_server = group.master
    cycles = Cycles(rl, group, key)
    cycles.start()
    try:
        assert cycles.warm.wait(30), "no 5 good cycles in a row before the failover"
        assert cycles.error is None, cycles.error
        t0 = time.monotonic()
        old = group.failover()
        new = group.wait_for_new_master(old, timeout=30)
        agreed = time.monotonic()
        new_server = group.server_at(new)
        assert new_server is not old_server
        cycles.new_master = new_server
        cycles.join(SWITCH_BOUND + 30)
        assert not cycles.is_alive(), "the cycles never settled on the new master"
    finally:
        cycles.stop.set()
        cycles.join(60)
    assert cycles.error is None, repr(cycles.error)
    records = cycles.records
    after = [r for r in records if r["after_switch"]]
    failures = [r for r in records if not r["good"]]
    kinds = collections.Counter(
        "not acquired"
        if r["outcome"] is None
        else "OK, not on the new master"
        if r["outcome"] == Outcome.OK
        else r["outcome"].name
        for r in failures
    )
    summary = (
        f"failover agreed after {agreed - t0:.2f} s; {len(records)} cycles "
        f"({len(after)} after), not good: {dict(kinds)}, e.g. "
        f"{[(r['outcome'], r['detail']) for r in failures if r['outcome'] != Outcome.OK][:3]}; "
        f"first good cycle on the new master {(cycles.switched_at or math.nan) - agreed:.2f} s "
        "after the sentinels agreed"
    )
    print(summary)  # (shown with -s)
    # every cycle took the lock (two plain masters of three are a quorum), none slowly
    assert all(r["got"] for r in records), summary
    bound = master_timeout + 1.0 + EXTRA_SLACK
    slow = [r for r in records if max(r["acquire_s"], r["release_s"]) >= bound]
    assert not slow, f"{len(slow)} slow calls, e.g. {slow[:3]}; {summary}"
    # the library moved to the new master, in time, and stayed there
    assert cycles.switched_at is not None, summary
    assert cycles.switched_at - agreed < SWITCH_BOUND, summary
    assert len(after) >= GOOD_RUN and all(r["good"] for r in after[-GOOD_RUN:]), summary
    # the failures (if any) were during the switch, not after it
    last_failure = max((r["t"] for r in failures), default=None)
    assert last_failure is None or last_failure < after[-GOOD_RUN]["t"], summary


# -- a service name no sentinel knows, no sentinel answering -------------------------------------


def eventual_state(rl, key, index, pred, what):
    """inspect()'s state of masters[index] once it satisfies pred (the group's first lookup may
    still be in flight at the first look); fails after a few seconds, showing the last one."""
    last = []

    def check():
        last[:] = [rl.inspect(key)[index]]
        return last[0] if pred(last[0]) else None

    try:
        return wait_until(check, 5 + EXTRA_SLACK, what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; last state {last}") from None


def test_group_master_with_a_password(engine, fresh_sentinel_group, masters5, make_redlock, key):
    """The URL's credentials are the group's master's: AUTH goes there (not to the sentinels);
    a wrong one is that master's error vote, with the server's reason."""
    group = fresh_sentinel_group
    password = "m4ster-Pw"
    for sentinel in group.sentinels:  # so that they keep watching the master
        sentinel.client().execute_command(
            "SENTINEL", "SET", group.service_name, "auth-pass", password
        )
    for server in group.servers:
        server.admin().config_set("masterauth", password)
        server.set_password(password)
    plain = masters5[:2]
    rl = make_redlock(
        [plain[0].url, group.url(credentials=f":{password}"), plain[1].url],
        master_timeout=MASTER_TIMEOUT,
    )
    open_connections(rl)  # (the group's master gets the SET only on an open connection)
    lock = rl.lock(key, TTL)
    assert lock.acquire(blocking=False)
    state = eventual_state(rl, key, 1, lambda s: s.ours is True, "ours on the group's master")
    assert state.outcome == Outcome.OK, state
    assert group.master.admin().get(key) == lock.token.encode()
    lock.release()
    assert group.master.admin().get(key) is None

    wrong = make_redlock(
        [plain[0].url, group.url(credentials=":not-the-password"), plain[1].url],
        master_timeout=MASTER_TIMEOUT,
    )
    state = eventual_state(
        wrong, key, 1, lambda s: "WRONGPASS" in (s.detail or ""), "the server's WRONGPASS"
    )
    assert state.outcome == Outcome.ERROR, state


@both_apis
def test_unknown_service_name(engine, api, sentinel_group, masters5, make_redlock, key):
    group = sentinel_group
    plain = masters5[:2]
    name = f"no-such-service-{uuid.uuid4().hex[:8]}"
    rl = make_redlock(
        [plain[0].url, group.url(service_name=name), plain[1].url],
        master_timeout=MASTER_TIMEOUT,
    )
    lock = rl.lock(key, TTL)
    for attempt in range(2):  # the first may wait for the lookup (bounded); the second never
        assert check_quick(timed(lock.acquire, blocking=False), f"acquire {attempt}") is True
        assert_values(plain, key, lock.token)
        state = eventual_state(
            rl, key, 1, lambda s: "no master named" in (s.detail or ""), "no master named"
        )
        assert state.outcome == Outcome.CONN_ERROR, state
        assert name in state.detail, state
        check_quick(timed(lock.release), f"release {attempt}")
        assert_no_key(plain, key)
    assert group.master.admin().get(key) is None  # nothing reached the group's real master

    # held on plain[0] only: the round needs the group's vote (plain[1] is free), a failure
    holder = f"{key}:held"
    set_foreign(plain[:1], holder)
    refused = rl.lock(holder, TTL)
    assert check_quick(timed(refused.acquire, blocking=False), "refused acquire") is False
    assert refused.last_votes[0].outcome == Outcome.TAKEN, refused.last_votes
    vote = refused.last_votes[1]
    assert vote.outcome == Outcome.CONN_ERROR and "no master named" in vote.detail, vote
    assert vote.master == group.url(service_name=name)


@both_apis
def test_unknown_service_name_alone(engine, api, sentinel_group, make_redlock, key):
    name = f"no-such-service-{uuid.uuid4().hex[:8]}"
    rl = make_redlock([sentinel_group.url(service_name=name)], master_timeout=MASTER_TIMEOUT)
    lock = rl.lock(key, TTL)
    deadline = time.monotonic() + 5 + EXTRA_SLACK
    votes = []
    while True:  # the first attempt may end before the first lookup has answered
        with pytest.raises(QuorumUnreachable) as caught:
            check_quick(timed(lock.acquire, blocking=False), f"acquire {len(votes)}")
        (vote,) = caught.value.votes
        votes.append(vote)
        assert vote.outcome == Outcome.CONN_ERROR, votes
        if "no master named" in (vote.detail or ""):
            break
        assert time.monotonic() < deadline, f"no 'no master named' reason: {votes}"
    assert name in vote.detail, vote
    assert not lock.held


@both_apis
def test_no_sentinel_answers(engine, api, masters5, make_redlock, key):
    """Nothing listens on the sentinels' ports: CONN_ERROR, the reason starting with sentinel."""
    plain = masters5[:2]
    url = f"redis+sentinel://127.0.0.1:{free_port()},127.0.0.1:{free_port()}/mymaster/0"
    rl = make_redlock([plain[0].url, url, plain[1].url], master_timeout=MASTER_TIMEOUT)
    lock = rl.lock(key, TTL)
    assert check_quick(timed(lock.acquire, blocking=False), "acquire") is True
    state = eventual_state(
        rl, key, 1, lambda s: (s.detail or "").startswith("sentinel"), "a sentinel's reason"
    )
    assert state.outcome == Outcome.CONN_ERROR, state
    check_quick(timed(lock.release), "release")
    assert_no_key(plain, key)


# -- the sentinels unreachable while the group's master is up ------------------------------------

# How long the master the sentinels last named keeps serving while they do not answer: the
# documented 5 minutes (_resolver.STALE_LIFETIME_S), shortened for these tests.
OUTAGE_STALE_S = 8.0
# A stopped sentinel costs a lookup its timeout: one lookup of the group, all of them.
STOPPED_LOOKUP_S = 3 * SENTINEL_TIMEOUT_S


def resolver_error(place) -> str:
    """Why the resolver's last lookup of `place` failed ("" when it answered)."""
    entry = _resolver._entries.get(place)
    return entry.error if entry is not None else ""


@pytest.mark.each_value_once
@both_apis
def test_stopped_sentinels_keep_the_last_master(
    engine, api, fresh_sentinel_group, make_redlock, key, monkeypatch
):
    """The sentinels SIGSTOPped (each lookup waits for all of them, then fails), the group's master
    up: its last known address keeps serving, on a client made before the outage and on one made
    during it (the lookups are shared by the process), until the answer's stale lifetime ends;
    then the group votes CONN_ERROR with the sentinels' reasons, on every client."""
    monkeypatch.setattr(_resolver, "STALE_LIFETIME_S", OUTAGE_STALE_S)
    group = fresh_sentinel_group
    master = group.master
    made_at = time.monotonic()  # the answers that serve below all came after this
    before = make_redlock([group.url()], master_timeout=MASTER_TIMEOUT)
    place = before.masters[0].sentinel
    assert attempt_votes(before, key, TTL) == (True, [])
    for sentinel in group.sentinels:
        sentinel.stop()
    try:
        # Locks keep being taken while the group's master is asked of the sentinels again (every
        # second while rounds use it), and that lookup fails.
        bound = 1.0 + 2 * STOPPED_LOOKUP_S + EXTRA_SLACK
        deadline = time.monotonic() + bound
        while not resolver_error(place):
            assert time.monotonic() < deadline, f"no lookup of the group failed in {bound} s"
            assert attempt_votes(before, key, TTL) == (True, [])
            time.sleep(0.05)
        failed_at = time.monotonic()  # the last good answer came before this
        assert resolver_error(place).startswith("sentinel: no master found"), place
        assert attempt_votes(before, key, TTL) == (True, [])
        during = make_redlock([group.url()], master_timeout=MASTER_TIMEOUT)
        got, votes = attempt_votes(during, key, TTL)
        assert (got, votes) == (True, []), resolver_error(place)
        assert master.admin().get(key) is None  # taken on the group's master, and released
        assert time.monotonic() < made_at + OUTAGE_STALE_S, "too slow for OUTAGE_STALE_S"

        # Past the stale lifetime (nothing waits for it but time), the sentinels' failure is the
        # group's vote: on the clients connected to the master too.
        time.sleep(max(0.0, failed_at + OUTAGE_STALE_S - time.monotonic()))
        after = make_redlock([group.url()], master_timeout=MASTER_TIMEOUT)
        for rl in (before, during, after):
            got, votes = attempt_votes(rl, key, TTL)
            assert not got, votes
            ((outcome, detail),) = votes
            assert outcome == Outcome.CONN_ERROR, votes
            assert detail.startswith("sentinel: no master found"), votes
    finally:
        for sentinel in group.sentinels:
            sentinel.cont()


# -- bad input, refused before any I/O ------------------------------------------------------------

S = "127.0.0.1:26379"
BAD = [
    pytest.param("redis+sentinel:///mymaster", id="url-no-sentinels"),
    pytest.param("redis+sentinel://,/mymaster", id="url-empty-sentinel-list"),
    pytest.param(f"redis+sentinel://{S}", id="url-no-service"),
    pytest.param(f"redis+sentinel://{S}/", id="url-empty-service"),
    pytest.param("redis+sentinel://127.0.0.1:port/mymaster", id="url-port-not-a-number"),
    pytest.param("redis+sentinel://127.0.0.1:70000/mymaster", id="url-port-out-of-range"),
    pytest.param(f"redis+sentinel://{S}/mymaster?bogus=1", id="url-unknown-parameter"),
    pytest.param(f"redis+sentinel://{S}/mymaster/notadb", id="url-bad-db"),
    pytest.param({"sentinels": [], "service_name": "m"}, id="dict-empty-sentinels"),
    pytest.param({"sentinels": ["127.0.0.1:x"], "service_name": "m"}, id="dict-port-not-a-number"),
    pytest.param({"sentinels": ["127.0.0.1:0"], "service_name": "m"}, id="dict-port-zero"),
    pytest.param({"sentinels": [":26379"], "service_name": "m"}, id="dict-empty-host"),
    pytest.param({"sentinels": [("127.0.0.1",)], "service_name": "m"}, id="dict-1-tuple"),
    pytest.param({"sentinels": [("127.0.0.1", 1, 2)], "service_name": "m"}, id="dict-3-tuple"),
    pytest.param({"sentinels": [26379], "service_name": "m"}, id="dict-int-entry"),
    pytest.param({"sentinels": [S]}, id="dict-no-service"),
    pytest.param({"sentinels": [S], "service_name": ""}, id="dict-empty-service"),
    pytest.param({"sentinels": [S], "service_name": "m", "host": "127.0.0.1"}, id="dict-host"),
    pytest.param({"sentinels": [S], "service_name": "m", "path": "/tmp/r.sock"}, id="dict-path"),
    pytest.param({"sentinels": [S], "service_name": "m", "bogus": 1}, id="dict-unknown-key"),
    pytest.param({"service_name": "m", "host": "127.0.0.1"}, id="dict-service-without-sentinels"),
]


@both_apis
@pytest.mark.parametrize("bad", BAD)
def test_bad_sentinel_master(engine, api, make_redlock, canary, bad):
    with pytest.raises(ValueError) as caught:
        make_redlock([canary.url, bad])
    assert "masters[1]" in str(caught.value), caught.value
    assert not canary.touched(), "the library connected somewhere while refusing bad input"


def test_bad_sentinel_url_hides_passwords(engine, make_redlock, canary):
    url = f"redis+sentinel://u:hunter2@{S}/mymaster?sentinel_password=s3cret&bogus=1"
    with pytest.raises(ValueError) as caught:
        make_redlock([canary.url, url])
    text = str(caught.value)
    assert "masters[1]" in text and "hunter2" not in text and "s3cret" not in text, text
    assert not canary.touched()
