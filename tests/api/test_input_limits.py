"""Bad input that used to slip through: refused with TypeError/ValueError naming the argument,
before any I/O (checked with servers.Canary masters, as in test_bad_input.py).

* clients whose address cannot be read (Sentinel-managed, a pool without host or path, a
  credential_provider) instead of being taken as localhost:6379 without a password;
* durations too large to be meant (huge ints, 1e300 s): ValueError at the call that takes them,
  never OverflowError later; every duration is at most hiredlock.MAX_TTL;
* lock names: lone surrogates, mutable buffers, and the prefix of the fencing counters;
* master fields the engines cannot use (a NUL in a host, non-ASCII digits, a db past 2**31 - 1).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
import redis
import redis.sentinel
from redis.credentials import UsernamePasswordCredentialProvider
from support import braced, urls

import hiredlock
from hiredlock import Redlock

RESERVED = "hiredlock:fence:"


def raises_naming(argname: str, call, *args, **kwargs) -> Exception:
    """call(*args, **kwargs) raises TypeError or ValueError (not OverflowError, not a bare
    UnicodeEncodeError) whose message names `argname`."""
    with pytest.raises((TypeError, ValueError)) as caught:
        call(*args, **kwargs)
    error = caught.value
    assert type(error) in (TypeError, ValueError), f"{type(error).__name__}: {error}"
    assert argname in str(error), f"{type(error).__name__}({error}) does not name {argname!r}"
    return error


# -- clients without a readable address -----------------------------------------------------


def test_a_sentinel_client_becomes_a_sentinel_managed_master(engine):
    # master_for() does no I/O; its pool names the service and its Sentinel the sentinels
    sentinel = redis.sentinel.Sentinel(
        [("127.0.0.1", 1)], sentinel_kwargs={"password": "s3nt"}, password="m4ster"
    )
    client = sentinel.master_for("mymaster", db=2)
    redlock = Redlock([client], backend=engine)
    try:
        (spec,) = redlock.masters
    finally:
        redlock.close()
    assert str(spec) == "redis+sentinel://127.0.0.1:1/mymaster/2"
    assert spec.sentinel.service_name == "mymaster"
    assert (spec.password, spec.sentinel.password) == ("m4ster", "s3nt")
    assert "s3nt" not in repr(spec) and "m4ster" not in repr(spec)


def test_help_lists_every_master_form():
    doc = " ".join((Redlock.__doc__ or "").split())
    for form in ("redis://", "rediss://", "unix://", "redis+sentinel://", "rediss+sentinel://"):
        assert form in doc, form
    assert "not a Sentinel-managed" not in doc  # they are taken (above)
    assert "Sentinel" in doc


def test_a_client_whose_pool_has_no_host_is_refused(engine, canary):
    client = redis.Redis(connection_pool=redis.ConnectionPool(password="x"))
    error = raises_naming("masters[0]", Redlock, [client], backend=engine)
    assert "URL" in str(error) and "dict" in str(error)
    assert not canary.touched()


def test_a_client_with_a_credential_provider_is_refused(engine, canary):
    provider = UsernamePasswordCredentialProvider("alice", "Sekrit-42")
    client = redis.Redis(host="127.0.0.1", port=canary.port, credential_provider=provider)
    error = raises_naming("masters[0]", Redlock, [client], backend=engine)
    assert "credential_provider" in str(error)
    assert "Sekrit-42" not in str(error)
    assert not canary.touched()


def test_clients_with_an_address_still_work(engine, make_redlock, masters5, key):
    clients = [
        redis.Redis(host="127.0.0.1", port=masters5[0].port, db=1),
        redis.Redis(unix_socket_path=masters5[1].unixsocket),
        redis.Redis.from_url(masters5[2].url),
    ]
    rl = make_redlock(clients)
    with rl.lock(key, 5):
        db1 = redis.Redis(host="127.0.0.1", port=masters5[0].port, db=1)
        assert db1.exists(key) == 1
        db1.close()


# -- durations ------------------------------------------------------------------------------

HUGE = [
    pytest.param(10**400, id="10**400"),
    pytest.param(-(10**400), id="-10**400"),
    pytest.param(10**5000, id="10**5000"),  # too long even for repr() (4300 digits at most)
    pytest.param(1e300, id="1e300"),
    pytest.param(1.7e308, id="1.7e308"),  # finite, but its milliseconds are not
    pytest.param(timedelta.max, id="timedelta.max"),
]


@pytest.mark.parametrize("value", HUGE)
@pytest.mark.parametrize("option", ["retry_delay", "master_timeout"])
def test_huge_redlock_durations_are_refused_when_made(engine, canary, option, value):
    raises_naming(option, Redlock, [canary.url], backend=engine, **{option: value})
    assert not canary.touched()


@pytest.mark.parametrize(
    "option,value", [("retry_delay", 1e300), ("master_timeout", 1e10)], ids=["rd", "mt"]
)
def test_the_reported_durations_are_refused_when_made(engine, canary, option, value):
    error = raises_naming(option, Redlock, [canary.url], backend=engine, **{option: value})
    assert "MAX_TTL" in str(error)


def test_durations_up_to_max_ttl_are_taken(engine, canary):
    longest = hiredlock.MAX_TTL
    Redlock([canary.url], backend=engine, retry_delay=longest, master_timeout=longest).close()
    rl = Redlock([canary.url], backend=engine)
    try:
        lock = rl.lock("n", longest, blocking_timeout=longest, auto_renew=True, max_hold=longest)
        assert lock.ttl == pytest.approx(longest, abs=0.001)
        rl.rlock("n", 5, blocking_timeout=timedelta(days=24))
    finally:
        rl.close()
    for option in ("retry_delay", "master_timeout"):
        raises_naming(option, Redlock, [canary.url], backend=engine, **{option: longest + 0.001})
    assert not canary.touched()


@pytest.mark.parametrize("value", HUGE)
def test_huge_lock_durations_are_refused(canary_redlock, value):
    rl = canary_redlock
    raises_naming("ttl", rl.lock, "n", value)
    raises_naming("ttl", rl.rlock, "n", value)
    raises_naming("ttl", rl.acquire_many, ["n"], value)
    raises_naming("ttl", rl.synchronized, "n", value)
    raises_naming("blocking_timeout", rl.lock, "n", 5, blocking_timeout=value)
    raises_naming("blocking_timeout", rl.rlock, "n", 5, blocking_timeout=value)
    raises_naming("max_hold", rl.lock, "n", 5, auto_renew=True, max_hold=value)
    raises_naming("timeout", rl.lock("n", 5).acquire, timeout=value)
    raises_naming("timeout", rl.rlock("n", 5).acquire, timeout=value)


@pytest.mark.parametrize(
    "option,value",
    [
        ("retry_count", -(10**5000)),
        ("drift_factor", 10**5000),
        ("drift_factor", -(10**5000)),
    ],
    ids=["retry_count", "drift_factor", "drift_factor-negative"],
)
def test_huge_ints_in_other_options_are_named(engine, canary, option, value):
    raises_naming(option, Redlock, [canary.url], backend=engine, **{option: value})


def test_huge_max_extensions_are_named(canary_redlock):
    raises_naming("max_extensions", canary_redlock.lock, "n", 5, max_extensions=-(10**5000))


def test_huge_extend_ttl_is_refused_and_the_lock_kept(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    lock = rl.lock(key, 30)
    assert lock.acquire(blocking=False)
    for value in (10**400, -(10**400), 1e300, timedelta.max):
        raises_naming("ttl", lock.extend, value)
        assert lock.held
    lock.release()


def test_a_master_timeout_of_max_ttl_inspects(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5), master_timeout=hiredlock.MAX_TTL)
    assert [state.exists for state in rl.inspect(key)] == [False] * 5


# -- lock names -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name", ["\ud800", "ok-then-\udfff", "\udcff"], ids=["lone", "tail", "esc"]
)
def test_a_name_that_is_not_unicode_text_is_refused(canary_redlock, name):
    error = raises_naming("name", canary_redlock.lock, name, 5)
    assert isinstance(error, ValueError)
    raises_naming("name", canary_redlock.inspect, name)


@pytest.mark.parametrize(
    "name", [bytearray(b"n"), memoryview(b"n")], ids=["bytearray", "memoryview"]
)
def test_a_mutable_or_borrowed_buffer_is_not_a_name(canary_redlock, name):
    error = raises_naming("name", canary_redlock.lock, name, 5)
    assert isinstance(error, TypeError)


def test_a_released_memoryview_is_not_a_name(canary_redlock):
    view = memoryview(b"n")
    view.release()
    raises_naming("name", canary_redlock.lock, view, 5)


@pytest.mark.parametrize(
    "name",
    [RESERVED + "acct", RESERVED, (RESERVED + "acct").encode(), RESERVED.encode() + b"\xff"],
    ids=["str", "prefix-only", "bytes", "bytes-not-utf8"],
)
def test_names_in_the_fencing_counters_space_are_refused(canary_redlock, name):
    rl = canary_redlock
    for make in (rl.lock, rl.rlock, rl.synchronized):
        error = raises_naming("name", make, name, 5)
        assert isinstance(error, ValueError)
        assert "reserved" in str(error) and "fenc" in str(error)
    raises_naming("name", rl.lock, name, 5, fencing=True)
    raises_naming("name", rl.inspect, name)
    raises_naming("name", rl.locked, name)
    raises_naming("name", rl.acquire_many, ["free", name], 5)


def test_a_callable_name_in_the_reserved_space_is_refused_at_the_call(canary_redlock):
    locked_call = canary_redlock.synchronized(lambda account: RESERVED + account, 5)(lambda a: a)
    raises_naming("name", locked_call, "acct")


def test_fenced_and_plain_locks_beside_the_reserved_space(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    fenced = rl.lock(key, 5, fencing=True)
    with fenced:
        assert fenced.fence == 1
    names = [key + "2", "hiredlock:fence", "hiredlock:fenc:" + key, "x" + RESERVED + key]
    for name in names:
        with rl.lock(name, 5) as lock:
            assert lock.fence is None
    with rl.lock(key, 5, fencing=True) as again:
        assert again.fence == 2  # the counter was not disturbed by the plain locks
    for server in masters5:
        assert server.admin().get(RESERVED.encode() + braced(key)) == b"2"


# -- master fields --------------------------------------------------------------------------


def _bad_masters(port: int) -> dict:
    return {
        "port-superscript-digit": {"host": "127.0.0.1", "port": "\u00b2"},
        "port-spaces": {"host": "127.0.0.1", "port": f" {port} "},
        "port-fullwidth": {"host": "127.0.0.1", "port": "\uff16\uff13\uff17\uff19"},
        "db-superscript-digit": {"host": "127.0.0.1", "port": port, "db": "\u00b2"},
        "db-too-big": {"host": "127.0.0.1", "port": port, "db": 2**31},
        "url-db-superscript-digit": f"redis://127.0.0.1:{port}/\u00b2",
        "url-db-too-big": f"redis://127.0.0.1:{port}/99999999999999",
        "host-nul": {"host": "127.0.0.1\x00evil", "port": port},
        "host-space": {"host": "127.0.0.1 ", "port": port},
        "host-surrogate": {"host": "\ud800", "port": port},
        "path-nul": {"path": "/tmp/x\x00y.sock"},
        "password-surrogate": {"host": "127.0.0.1", "port": port, "password": "\ud800"},
        "username-surrogate": {"host": "127.0.0.1", "port": port, "username": "\udcff"},
    }


BAD_MASTER_IDS = list(_bad_masters(1))
FIELD = {"url-db-superscript-digit": "db", "url-db-too-big": "db"}


@pytest.mark.parametrize("case", BAD_MASTER_IDS)
def test_master_fields_the_engines_cannot_use_are_refused(engine, canary, case):
    master = _bad_masters(canary.port)[case]
    field = FIELD.get(case, case.split("-")[0])
    error = raises_naming("masters[0]", Redlock, [master], backend=engine)
    assert field in str(error)
    assert "\ud800" not in str(error)  # the message itself must be printable
    assert not canary.touched()


def test_port_and_db_as_strings_of_digits_still_work(engine, canary):
    rl = Redlock([{"host": "127.0.0.1", "port": str(canary.port), "db": "3"}], backend=engine)
    try:
        assert (rl.masters[0].port, rl.masters[0].db) == (canary.port, 3)
    finally:
        rl.close()
    assert not canary.touched()


def test_the_largest_db_is_taken(engine, canary):
    rl = Redlock([f"redis://127.0.0.1:{canary.port}/{2**31 - 1}"], backend=engine)
    rl.close()
    assert not canary.touched()
