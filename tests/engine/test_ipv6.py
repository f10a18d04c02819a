"""Masters over IPv6: a server listening on both 127.0.0.1 and ::1, named `redis://[::1]:PORT/0`,
as a dict with host "::1", and as `redis://localhost:PORT/0`; and the same server's TLS port over
::1 (its certificate names ::1).  Both engines, both APIs.  The keys are checked on the server
through its IPv4 admin connection.

The only skip: a machine without an IPv6 loopback (probed by binding a socket to ::1)."""

from __future__ import annotations

import urllib.parse

import pytest
from apis import make_redlock_fixture, pytest_generate_tests  # noqa: F401  (sync and async APIs)
from servers import RedisServer, ipv6_loopback
from support import assert_no_key, assert_pttl_between, assert_values

from hiredlock import Outcome

TTL = 10.0
MT = 1.0  # a cold connect on a loaded machine must not fail a vote


@pytest.fixture(scope="module")
def dual_stack_server(redis_server_bin, tls_certs):
    """One server bound to 127.0.0.1 and ::1, plaintext and TLS (module-wide: the tests use
    keys of their own)."""
    why = ipv6_loopback()
    if why is not None:
        pytest.skip(why)
    srv = RedisServer(bind=("127.0.0.1", "::1"), tls=tls_certs.server())
    yield srv
    srv.cleanup()


def _addresses(srv, certs):
    ca = urllib.parse.quote(certs.ca, safe="/")
    return {
        "url": (f"redis://[::1]:{srv.port}/0", f"redis://[::1]:{srv.port}/0"),
        "dict": ({"host": "::1", "port": srv.port}, f"redis://[::1]:{srv.port}/0"),
        "localhost": (f"redis://localhost:{srv.port}/0", f"redis://localhost:{srv.port}/0"),
        "tls-url": (
            f"rediss://[::1]:{srv.tls_port}/0?ssl_ca_certs={ca}",
            f"rediss://[::1]:{srv.tls_port}/0",
        ),
        "tls-dict": (
            {"host": "::1", "port": srv.tls_port, "ssl": True, "ssl_ca_certs": certs.ca},
            f"rediss://[::1]:{srv.tls_port}/0",
        ),
    }


@pytest.mark.parametrize("form", ["url", "dict", "localhost", "tls-url", "tls-dict"])
def test_ipv6_master(engine, make_redlock, dual_stack_server, tls_certs, key, form):
    srv = dual_stack_server
    master, name = _addresses(srv, tls_certs)[form]
    rl = make_redlock([master], master_timeout=MT)
    (spec,) = rl.masters
    assert str(spec) == name
    lock = rl.lock(key, TTL)
    assert lock.acquire(blocking=False)
    assert_values([srv], key, lock.token)
    lock.extend(3 * TTL)
    assert_pttl_between([srv], key, 2 * TTL * 1000, 3 * TTL * 1000)
    (state,) = rl.inspect(key)
    assert state.outcome == Outcome.OK and state.ours, state
    lock.release()
    assert_no_key([srv], key)


def test_ipv6_and_ipv4_names_of_one_server_are_different_masters(
    engine, make_redlock, dual_stack_server, key
):
    """[::1] and 127.0.0.1 are two names of one server: both are accepted (they are not
    duplicates by address), and both reach that server (a key set through the admin connection
    shows through both)."""
    srv = dual_stack_server
    rl = make_redlock([f"redis://[::1]:{srv.port}/0", srv.url], master_timeout=MT)
    assert [str(spec) for spec in rl.masters] == [
        f"redis://[::1]:{srv.port}/0",
        f"redis://127.0.0.1:{srv.port}/0",
    ]
    states = rl.inspect(key)
    assert [s.outcome for s in states] == [Outcome.OK, Outcome.OK], states
    assert not any(s.exists for s in states)
    srv.admin().set(key, b"x")
    states = rl.inspect(key)
    assert [s.exists for s in states] == [True, True], states
