"""Bad input raises TypeError/ValueError naming the argument, before any I/O: the Redlock's
options, ttls, names, masters and acquire arguments, and the lock options of rl.lock(),
rl.rlock() and @rl.synchronized (at decoration, for a static or a callable name); max_extensions
is enforced before any I/O, and blocking_timeout must be >= 0.

"No I/O" is checked soundly with a canary (servers.Canary): the master URL points at a loopback
socket that we listen on and never accept; any connection attempt by the library would complete
in the kernel and show up in its accept queue (Canary.touched()).

The tests that need no redis-server (all but test_bad_extend_ttl and test_max_extensions_counts)
also run against installed wheels (pyproject's cibuildwheel test-command).
"""

from __future__ import annotations

import math
import uuid
from datetime import timedelta

import pytest
import redis
from apis import make_redlock_fixture, pytest_generate_tests  # noqa: F401  (sync and async APIs)
from features_support import MT, leakcheck_fixture, script_calls  # noqa: F401  (the leakcheck fixture)
from servers import Canary
from support import assert_no_key, urls

import hiredlock
from hiredlock import NotHeld, TooManyExtensions


def _raises_naming(fn, argname, canary):
    with pytest.raises((TypeError, ValueError)) as ei:
        fn()
    assert argname in str(ei.value), (
        f"{type(ei.value).__name__}({ei.value}) does not name {argname!r}"
    )
    assert not canary.touched(), "the library connected to a master while rejecting bad input"
    return ei.value


BAD_TTLS = [
    pytest.param(0, id="zero"),
    pytest.param(0.0, id="zero-float"),
    pytest.param(-1, id="negative"),
    pytest.param(-0.5, id="negative-float"),
    pytest.param(math.nan, id="nan"),
    pytest.param(math.inf, id="inf"),
    pytest.param(-math.inf, id="-inf"),
    pytest.param(True, id="bool-true"),
    pytest.param(False, id="bool-false"),
    pytest.param("10", id="str"),
    pytest.param(None, id="none"),
    pytest.param([1], id="list"),
    pytest.param(b"1", id="bytes"),
    pytest.param(1 + 0j, id="complex"),
    pytest.param(timedelta(0), id="timedelta-zero"),
    pytest.param(timedelta(seconds=-1), id="timedelta-negative"),
    pytest.param("max+1", id="over-MAX_TTL"),
    pytest.param(10**12, id="huge-int"),
    pytest.param(timedelta(days=365), id="timedelta-year"),
    pytest.param(0.0001, id="below-1ms"),
    pytest.param(0.002, id="no-validity-after-drift"),
    pytest.param(0.005, id="no-validity-after-default-master-timeout"),
]


@pytest.mark.parametrize("ttl", BAD_TTLS)
def test_bad_ttl(engine, make_redlock, canary, ttl):
    if ttl == "max+1":
        ttl = hiredlock.MAX_TTL + 1
    rl = make_redlock([canary.url])
    try:
        _raises_naming(lambda: rl.lock("name", ttl), "ttl", canary)
    finally:
        rl.close()
    assert not canary.touched()


def test_ttl_type_errors_are_type_errors(engine, make_redlock, canary):
    rl = make_redlock([canary.url])
    try:
        for bad in ("10", None, [1], True):
            with pytest.raises(TypeError, match="ttl"):
                rl.lock("name", bad)
        for bad in (0, -1, math.nan, math.inf):
            with pytest.raises(ValueError, match="ttl"):
                rl.lock("name", bad)
    finally:
        rl.close()
    assert not canary.touched()


def test_a_ttl_or_name_seen_before_lets_no_bad_one_through(engine, make_redlock, canary):
    # The client keeps the timing of each ttl and the keys of each name it has checked: True
    # equals 1 and hashes as 1, and must be refused after 1 was accepted; 1.0 gives 1's timing.
    rl = make_redlock([canary.url])
    try:
        assert rl.lock("name", 1).ttl == rl.lock("name", 1.0).ttl == 1.0
        with pytest.raises(TypeError, match="ttl"):
            rl.lock("name", True)
        rl.lock(b"name", 1)
        with pytest.raises(ValueError, match="name"):
            rl.lock("", 1)
    finally:
        rl.close()
    assert not canary.touched()


def test_ttl_too_small_for_explicit_master_timeout(engine, make_redlock, canary):
    rl = make_redlock([canary.url], master_timeout=1)
    try:
        _raises_naming(lambda: rl.lock("name", 1), "ttl", canary)
        _raises_naming(lambda: rl.lock("name", 0.5), "ttl", canary)
        rl.lock("name", 1.1)  # 1.1 - 0.011 - 0.002 - 1 > 0: fine
    finally:
        rl.close()
    assert not canary.touched()


def test_good_ttls_do_no_io(engine, make_redlock, canary):
    rl = make_redlock([canary.url])
    try:
        for ttl in (hiredlock.MAX_TTL, 0.01, 1, 2.5, timedelta(minutes=5), 10**6):
            lk = rl.lock("name", ttl)
            assert lk.ttl > 0
        assert rl.lock("name", hiredlock.MAX_TTL).ttl == pytest.approx(hiredlock.MAX_TTL, abs=0.001)
    finally:
        rl.close()
    assert not canary.touched()


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("", id="empty-str"),
        pytest.param(b"", id="empty-bytes"),
        pytest.param(None, id="none"),
        pytest.param(1, id="int"),
        pytest.param(1.5, id="float"),
        pytest.param(["x"], id="list"),
        pytest.param(object(), id="object"),
    ],
)
def test_bad_name(engine, make_redlock, canary, name):
    rl = make_redlock([canary.url])
    try:
        _raises_naming(lambda: rl.lock(name, 5), "name", canary)
    finally:
        rl.close()


BAD_OPTIONS = [
    ("retry_count", -1),
    ("retry_count", "3"),
    ("retry_count", 1.5),
    ("retry_count", None),
    ("retry_delay", -0.1),
    ("retry_delay", timedelta(seconds=-1)),
    ("retry_delay", "0.1"),
    ("drift_factor", -0.01),
    ("drift_factor", 0.5),
    ("drift_factor", 1),
    ("drift_factor", math.nan),
    ("drift_factor", "0.01"),
    ("master_timeout", 0),
    ("master_timeout", -1),
    ("master_timeout", timedelta(0)),
    ("master_timeout", math.nan),
    ("master_timeout", "x"),
    ("backend", "bogus"),
]


@pytest.mark.parametrize("opt,value", BAD_OPTIONS, ids=[f"{o}={v!r}" for o, v in BAD_OPTIONS])
def test_bad_option(engine, make_redlock, canary, opt, value):
    kw = {"backend": engine, opt: value}
    _raises_naming(lambda: make_redlock([canary.url], **kw), opt, canary)


def _bad_masters(canary):
    p = canary.port
    u = canary.url
    return {
        "empty-list": [],
        "empty-tuple": (),
        "bare-url-string": u,
        "none": None,
        "int": 5,
        "duplicate-url": [u, u],
        "duplicate-url-db-default": [f"redis://127.0.0.1:{p}", f"redis://127.0.0.1:{p}/0"],
        "duplicate-url-and-dict": [u, {"host": "127.0.0.1", "port": p}],
        "duplicate-host-case": [f"redis://localhost:{p}/0", f"redis://LOCALHOST:{p}/0"],
        "scheme-http": [u, f"http://127.0.0.1:{p}/0"],
        "no-host": [u, "redis://"],
        "port-not-number": [u, "redis://127.0.0.1:notaport/0"],
        "port-out-of-range": [u, "redis://127.0.0.1:70000/0"],
        "port-zero": [u, "redis://127.0.0.1:0/0"],
        "db-not-number": [u, f"redis://127.0.0.1:{p + 1}/notadb"],
        "db-negative": [u, f"redis://127.0.0.1:{p + 1}/-1"],
        "unix-no-path": [u, "unix://"],
        "empty-url": [u, ""],
        "item-int": [u, 12345],
        "item-none": [u, None],
        "dict-bad-port": [u, {"host": "127.0.0.1", "port": "x"}],
        "dict-unknown-key": [u, {"hots": "127.0.0.1", "port": p + 1}],
    }


BAD_MASTER_IDS = list(
    _bad_masters(type("C", (), {"port": 1, "url": "redis://127.0.0.1:1/0"})()).keys()
)


@pytest.mark.parametrize("case", BAD_MASTER_IDS)
def test_bad_masters(engine, make_redlock, canary, case):
    masters = _bad_masters(canary)[case]
    _raises_naming(lambda: make_redlock(masters), "masters", canary)


class InProcessConnection(redis.Connection):
    """A connection class that is not redis-py's own, as an in-process fake server's client
    (fakeredis's) has: the address in its pool is not a server hiredlock could reach."""


def test_a_client_with_connections_of_its_own_is_refused(engine, make_redlock, canary):
    # fakeredis names its in-process server with a random host, which no resolver knows
    pool = redis.ConnectionPool(connection_class=InProcessConnection, host=uuid.uuid4().hex)
    client = redis.Redis(connection_pool=pool)
    err = _raises_naming(lambda: make_redlock([canary.url, client]), "masters[1]", canary)
    assert isinstance(err, TypeError), repr(err)
    message = str(err)
    assert "InProcessConnection" in message
    assert "hiredlock.testing.memory_masters" in message  # what to use instead
    # where that is explained
    assert "https://hiredlock.readthedocs.io/en/latest/testing/" in message


@pytest.mark.parametrize(
    "kw,arg",
    [
        ({"timeout": -1}, "timeout"),
        ({"timeout": math.nan}, "timeout"),
        ({"timeout": "x"}, "timeout"),
        ({"blocking": "yes"}, "blocking"),
        ({"blocking": False, "timeout": 1}, "timeout"),  # as threading.Lock refuses it
    ],
)
def test_bad_acquire_arguments(engine, make_redlock, canary, kw, arg):
    rl = make_redlock([canary.url])
    try:
        lk = rl.lock("name", 5)
        _raises_naming(lambda: lk.acquire(**kw), arg, canary)
        assert not lk.held
    finally:
        rl.close()


def test_construction_and_lock_do_no_io(engine, make_redlock, canary):
    rl = make_redlock(
        [canary.url],
        retry_count=2,
        retry_delay=0.01,
        drift_factor=0.02,
        master_timeout=timedelta(milliseconds=20),
    )
    lk = rl.lock("name", 1)
    assert rl.quorum == 1
    assert lk.validity == 0.0 and not lk.held and lk.token is None
    assert not canary.touched()
    rl.close()
    assert not canary.touched()


def test_bad_extend_ttl(engine, make_redlock, masters5, key):
    """extend() validates its ttl before any I/O: the held lock and its keys are untouched."""
    from support import assert_values

    rl = make_redlock([m.url for m in masters5])
    lk = rl.lock(key, 30)
    assert lk.acquire(blocking=False)
    for bad in (0, -1, math.nan, math.inf, True, "5", hiredlock.MAX_TTL + 1, 0.002):
        with pytest.raises((TypeError, ValueError), match="ttl"):
            lk.extend(bad)
        assert lk.held
    assert_values(masters5, key, lk.token)
    for m in masters5:
        assert m.admin().pttl(key) > 25000
    lk.release()


def test_canary_detects_io(engine, make_redlock, canary):
    """Control for the no-I/O checks above: a real attempt does show up on the canary."""
    rl = make_redlock([canary.url], retry_count=1)
    try:
        with pytest.raises(hiredlock.QuorumUnreachable):
            rl.lock("name", 1).acquire(blocking=False)
    finally:
        rl.close()
    assert canary.touched()


# -- lock options ----------------------------------------------------------------------------------


@pytest.fixture
def canaries():
    cs = [Canary() for _ in range(3)]
    yield cs
    for c in cs:
        c.close()


# (options, exception type, argument name that the message must contain)
BAD = [
    pytest.param({"max_hold": 5}, ValueError, "max_hold", id="max_hold-without-auto_renew"),
    pytest.param(
        {"max_hold": 5, "auto_renew": False}, ValueError, "max_hold", id="max_hold-auto_renew-False"
    ),
    pytest.param({"auto_renew": True, "max_hold": 0}, ValueError, "max_hold", id="max_hold-zero"),
    pytest.param(
        {"auto_renew": True, "max_hold": -1}, ValueError, "max_hold", id="max_hold-negative"
    ),
    pytest.param(
        {"auto_renew": True, "max_hold": math.nan}, ValueError, "max_hold", id="max_hold-nan"
    ),
    pytest.param({"auto_renew": True, "max_hold": "5"}, TypeError, "max_hold", id="max_hold-str"),
    pytest.param({"max_extensions": -1}, ValueError, "max_extensions", id="max_extensions-neg"),
    pytest.param({"max_extensions": 1.5}, TypeError, "max_extensions", id="max_extensions-float"),
    pytest.param({"max_extensions": "3"}, TypeError, "max_extensions", id="max_extensions-str"),
    pytest.param({"max_extensions": True}, TypeError, "max_extensions", id="max_extensions-bool"),
    pytest.param({"on_lost": 5}, TypeError, "on_lost", id="on_lost-int"),
    pytest.param({"on_lost": "callback"}, TypeError, "on_lost", id="on_lost-str"),
    pytest.param({"auto_renew": 1}, TypeError, "auto_renew", id="auto_renew-int"),
    pytest.param({"auto_renew": "yes"}, TypeError, "auto_renew", id="auto_renew-str"),
    pytest.param({"auto_renew": None}, TypeError, "auto_renew", id="auto_renew-none"),
    pytest.param({"fencing": 1}, TypeError, "fencing", id="fencing-int"),
    pytest.param({"fencing": "true"}, TypeError, "fencing", id="fencing-str"),
    pytest.param({"fencing": None}, TypeError, "fencing", id="fencing-none"),
    pytest.param({"blocking_timeout": -1}, ValueError, "blocking_timeout", id="bt-negative"),
    pytest.param({"blocking_timeout": -0.001}, ValueError, "blocking_timeout", id="bt-neg-small"),
    pytest.param({"blocking_timeout": math.nan}, ValueError, "blocking_timeout", id="bt-nan"),
    pytest.param({"blocking_timeout": "1"}, TypeError, "blocking_timeout", id="bt-str"),
    pytest.param({"blocking_timeout": True}, TypeError, "blocking_timeout", id="bt-bool"),
]

MAKERS = ["lock", "rlock", "synchronized-static", "synchronized-callable"]


def make_with(rl, maker, options):
    if maker == "lock":
        return rl.lock("name", 5, **options)
    if maker == "rlock":
        return rl.rlock("name", 5, **options)
    name = "name" if maker == "synchronized-static" else (lambda x: f"name:{x}")
    return rl.synchronized(name, 5, **options)


@pytest.mark.parametrize("maker", MAKERS)
@pytest.mark.parametrize(("options", "exc_type", "argname"), BAD)
def test_bad_lock_option(engine, make_redlock, canaries, maker, options, exc_type, argname):
    rl = make_redlock([c.url for c in canaries])
    try:
        with pytest.raises(exc_type) as ei:
            make_with(rl, maker, options)
        assert argname in str(ei.value), f"{ei.value!r} does not name {argname!r}"
    finally:
        rl.close()
    assert not any(c.touched() for c in canaries), "the library connected while refusing input"


@pytest.mark.parametrize("maker", MAKERS)
def test_good_options_are_accepted_without_io(engine, make_redlock, canaries, maker):
    rl = make_redlock([c.url for c in canaries])
    try:
        make_with(
            rl,
            maker,
            {
                "auto_renew": True,
                "max_hold": 2.5,
                "on_lost": print,
                "max_extensions": 0,
                "fencing": True,
                "blocking_timeout": 0,
            },
        )
    finally:
        rl.close()
    assert not any(c.touched() for c in canaries)


def test_extend_past_max_extensions_before_io(engine, make_redlock, canaries):
    rl = make_redlock([c.url for c in canaries])
    try:
        lock = rl.lock("name", 5, max_extensions=0)
        with pytest.raises(TooManyExtensions):
            lock.extend()
        with pytest.raises((TypeError, ValueError), match="ttl"):
            rl.lock("name", 5).extend(ttl=-1)
    finally:
        rl.close()
    assert not any(c.touched() for c in canaries)


def test_max_extensions_counts(engine, make_redlock, masters5, key, leakcheck):
    rl = make_redlock(urls(masters5), master_timeout=MT)
    lock = rl.lock(key, 5, max_extensions=2)
    with pytest.raises(NotHeld):
        lock.extend()
    assert lock.acquire(blocking=False)
    lock.extend()
    lock.extend(3)
    assert lock.extensions == 2
    before = script_calls(masters5)
    with pytest.raises(TooManyExtensions):
        lock.extend()
    assert script_calls(masters5) == before, "TooManyExtensions after I/O"
    assert lock.held and lock.extensions == 2
    lock.release()
    # A new acquisition starts counting again.
    assert lock.acquire(blocking=False)
    assert lock.extensions == 0
    lock.extend()
    lock.release()
    assert_no_key(masters5, key)
    leakcheck.close_and_check(rl)


# A misspelt option of each lock maker, and an option another maker takes (fair is lock()'s).
MISSPELT_OPTIONS = {
    "lock": (lambda rl: rl.lock("name", 10, ttl_ms=5), "ttl_ms"),
    "lock-fair": (lambda rl: rl.lock("name", 10, fair=True, blocking_timout=1), "blocking_timout"),
    "rlock": (lambda rl: rl.rlock("name", 10, auto_renw=True), "auto_renw"),
    "rlock-fair": (lambda rl: rl.rlock("name", 10, fair=True), "fair"),
    "semaphore": (lambda rl: rl.semaphore("name", 2, 10, ttl_ms=5), "ttl_ms"),
    "semaphore-fair": (lambda rl: rl.semaphore("name", 2, 10, fair=True), "fair"),
    "rwlock": (lambda rl: rl.rwlock("name", 10, max_extension=2), "max_extension"),
    "synchronized": (lambda rl: rl.synchronized("name", 10, on_lose=print), "on_lose"),
}


@pytest.mark.parametrize("case", list(MISSPELT_OPTIONS))
def test_misspelt_option_names_the_public_method(engine, make_redlock, canary, api, case):
    """An option a maker does not take is refused as Python refuses an unknown keyword, naming
    the method the caller called (not a class it hands its options to), before any I/O."""
    make, option = MISSPELT_OPTIONS[case]
    method = case.split("-")[0]
    client = "Redlock" if api == "sync" else "AsyncRedlock"
    rl = make_redlock([canary.url])
    with pytest.raises(TypeError) as ei:
        make(rl)
    assert str(ei.value) == f"{client}.{method}() got an unexpected keyword argument {option!r}"
    assert not canary.touched(), "the library connected to a master while refusing bad input"
