"""Feature 8: bad values for the new options raise TypeError/ValueError naming the argument, before
any I/O, from rl.lock(), rl.rlock() and @rl.synchronized (at decoration, for a static or a callable
name).  "No I/O" is checked with servers.Canary masters: a loopback listener nobody should connect
to (any connection attempt lands in its accept queue).  Also: max_extensions is enforced before any
I/O, and blocking_timeout must be >= 0."""

from __future__ import annotations

import math

import pytest
from apis import make_redlock_fixture, pytest_generate_tests  # noqa: F401  (sync and async APIs)
from features_support import MT, leakcheck_fixture, script_calls  # noqa: F401  (the leakcheck fixture)
from servers import Canary
from support import assert_no_key, urls

from hiredlock import NotHeld, TooManyExtensions


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
def test_bad_option(engine, make_redlock, canaries, maker, options, exc_type, argname):
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
