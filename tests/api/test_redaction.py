"""No password is ever shown: not in errors, reprs, votes, logs, nor in the command's output.

Every path that formats a master is driven with a password in it (in the URL's user:password@, in
a ?password= parameter, in a dict, in a redis-py client) and the text it produces is searched for
the password. Where a URL is echoed back, its password reads `***`.
"""

from __future__ import annotations

import logging
import time

import pytest
import redis
from cli_support import (
    cli,
    command_line_text,
    command_lines_mentioning,
    env,
    processes_mentioning,
    start,
    stop,
)
from support import SECRET, assert_hidden

from hiredlock import MasterSpec, QuorumUnreachable, Redlock
from hiredlock._core import redaction as _redaction

# -- the redaction rule -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,expected",
    [
        ("redis://user:pw@host:6379/0", "redis://user:***@host:6379/0"),
        ("redis://:pw@host:6379/0", "redis://:***@host:6379/0"),
        ("rediss://user:p%40w@host/0", "rediss://user:***@host/0"),
        ("redis://user:p@w@host:1/0", "redis://user:***@host:1/0"),
        ("redis://user:pa/ss@host:1/0", "redis://user:***@host:1/0"),
        ("redis://host:1/0?password=pw&db=2", "redis://host:1/0?password=***&db=2"),
        ("unix:///tmp/s.sock?db=1&password=pw", "unix:///tmp/s.sock?db=1&password=***"),
        (
            "a redis://u:x@h:1/0, b 'redis://u:y@h:2/0'",
            "a redis://u:***@h:1/0, b 'redis://u:***@h:2/0'",
        ),
        ("redis://user@host:6379/0", "redis://user@host:6379/0"),
        ("redis://host:6379/0", "redis://host:6379/0"),
        ("no URL here: a:b@c", "no URL here: a:b@c"),
    ],
)
def test_the_redaction_rule(text, expected):
    assert _redaction.redact(text) == expected


# -- every error of a URL master ------------------------------------------------------------

BAD_URLS = {
    "port-not-a-number": f"redis://user:{SECRET}@127.0.0.1:notaport/0",
    "port-out-of-range": f"redis://user:{SECRET}@127.0.0.1:70000/0",
    "port-zero": f"redis://user:{SECRET}@127.0.0.1:0/0",
    "db-not-a-number": f"redis://user:{SECRET}@127.0.0.1:6379/notadb",
    "db-query-not-a-number": f"redis://user:{SECRET}@127.0.0.1:6379?db=x",
    "unknown-parameter": f"redis://user:{SECRET}@127.0.0.1:6379/0?timeout=1",
    "scheme-http": f"http://user:{SECRET}@127.0.0.1:6379/0",
    "rediss-bad-cert-reqs": f"rediss://user:{SECRET}@127.0.0.1:6379/0?ssl_cert_reqs=maybe",
    "rediss-missing-ca-file": f"rediss://user:{SECRET}@127.0.0.1:6379/0?ssl_ca_certs=/no/ca.pem",
    "rediss-ssl-password": f"rediss://127.0.0.1:6379/0?ssl_certfile=/no/c.pem&ssl_password={SECRET}",
    "no-host": f"redis://user:{SECRET}@/0",
    "unix-no-path": f"unix://user:{SECRET}@",
    "bad-ipv6": f"redis://user:{SECRET}@[::1/0",
    "netloc-not-nfkc": f"redis://user:{SECRET}\u2100@127.0.0.1/0",
    "no-user": f"redis://:{SECRET}@127.0.0.1:notaport/0",
    "percent-encoded": f"redis://user:p%40{SECRET}@127.0.0.1:notaport/0",
    "at-sign-in-password": f"redis://user:p@{SECRET}@127.0.0.1:notaport/0",
    "query-password-bad-port": f"redis://127.0.0.1:notaport/0?password={SECRET}",
    "query-password-unknown-parameter": f"redis://127.0.0.1:6379/0?password={SECRET}&timeout=1",
    "query-password-rediss": f"rediss://127.0.0.1:6379/0?password={SECRET}&timeout=1",
    "query-password-http": f"http://127.0.0.1:6379/0?db=0&password={SECRET}",
}


@pytest.mark.parametrize("case", list(BAD_URLS))
def test_a_bad_url_error_hides_the_password(engine, canary, case):
    with pytest.raises(ValueError) as caught:
        Redlock([canary.url, BAD_URLS[case]], backend=engine)
    message = str(caught.value)
    assert "masters[1]" in message
    assert_hidden(message)
    assert not canary.touched()


def test_a_password_with_a_slash_does_not_leak_through_the_port_error(engine):
    # urlsplit ends the netloc at the "/": "user:Zq9" reads as host "user" and port "Zq9".
    with pytest.raises(ValueError) as caught:
        Redlock(["redis://user:Zq9/Xk7@127.0.0.1:6379/0"], backend=engine)
    assert "masters[0]" in str(caught.value)
    assert_hidden(str(caught.value), "Zq9", "Xk7")


def test_duplicate_masters_error_hides_the_password(engine):
    url = f"redis://user:{SECRET}@127.0.0.1:6379/0"
    with pytest.raises(ValueError) as caught:
        Redlock([url, {"host": "127.0.0.1", "password": SECRET}], backend=engine)
    assert "masters[1] duplicates masters[0]" in str(caught.value)
    assert_hidden(str(caught.value))


# -- dict masters ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"host": "127.0.0.1", "password": SECRET, "pasword": SECRET},
        {"host": "127.0.0.1", "password": SECRET, "port": "x"},
        {"host": "127.0.0.1", "password": SECRET, "port": 0},
        {"host": "127.0.0.1", "password": SECRET, "db": -1},
        {"host": "127.0.0.1", "password": SECRET, "path": "/tmp/x.sock"},
        {"host": "127.0.0.1", "password": SECRET, "username": 5},
        {"host": "", "password": SECRET},
    ],
    ids=[
        "unknown-key",
        "port-str",
        "port-zero",
        "db-negative",
        "host-and-path",
        "user-int",
        "host",
    ],
)
def test_a_bad_dict_error_hides_the_password(engine, options):
    with pytest.raises((TypeError, ValueError)) as caught:
        Redlock([options], backend=engine)
    assert "masters[0]" in str(caught.value)
    assert_hidden(str(caught.value))


# -- reprs and names ------------------------------------------------------------------------


def _masters_with_password(port: int) -> list:
    return [
        f"redis://alice:{SECRET}@127.0.0.1:{port}/0",
        f"redis://127.0.0.1:{port}/1?password={SECRET}",
        {"host": "127.0.0.1", "port": port, "db": 2, "password": SECRET},
        redis.Redis(host="127.0.0.1", port=port, db=3, password=SECRET),
    ]


def test_master_spec_repr_and_str_hide_the_password():
    spec = MasterSpec(host="h", port=1, username="alice", password=SECRET)
    assert_hidden(repr(spec))
    assert_hidden(str(spec))
    assert "password='***'" in repr(spec)
    assert "username='alice'" in repr(spec)
    # none set: none hidden
    assert repr(MasterSpec(host="h")).endswith("password=None, tls=None, sentinel=None)")


def test_redlock_masters_and_their_reprs_hide_the_password(engine, canary):
    rl = Redlock(_masters_with_password(canary.port), backend=engine)
    try:
        assert [spec.password for spec in rl.masters] == [SECRET] * 4  # kept, to log in
        for text in (repr(rl), str(rl), repr(rl.masters), str(rl.masters), repr(rl.lock("n", 5))):
            assert_hidden(text)
        assert all(str(spec).startswith("redis://127.0.0.1:") for spec in rl.masters)
    finally:
        rl.close()
    assert not canary.touched()


def test_votes_exceptions_states_and_logs_hide_the_password(engine, redis_factory, caplog):
    (server,) = redis_factory(1)
    port = server.port
    server.kill()  # connection refused on every master: every failure path formats them
    caplog.set_level(logging.DEBUG, logger="hiredlock")
    rl = Redlock(_masters_with_password(port), backend=engine, retry_count=1)
    try:
        with pytest.raises(QuorumUnreachable) as caught:
            rl.lock("n", 5).acquire(blocking=False)
        texts = [str(caught.value), repr(caught.value), *map(str, caught.value.votes)]
        texts += [repr(vote) for vote in caught.value.votes]
        texts.append(repr(rl.inspect("n")))
    finally:
        rl.close()
    for text in [*texts, caplog.text]:
        assert_hidden(text)


# -- the command line -----------------------------------------------------------------------

BAD_COMMAND_URL = f"redis://alice:{SECRET}@127.0.0.1:notaport/0"


def _command(subcommand: str, *args: str) -> list[str]:
    return (
        ["run", "lock-name", *args, "--", "true"]
        if subcommand == "run"
        else [subcommand, "n", *args]
    )


@pytest.mark.parametrize("subcommand", ["run", "status"])
@pytest.mark.parametrize("where", ["option", "environment"])
def test_the_command_hides_the_password_of_a_bad_url(subcommand, where):
    if where == "option":
        proc = cli(*_command(subcommand, "--masters", BAD_COMMAND_URL))
    else:
        proc = cli(*_command(subcommand), environ=env(HIREDLOCK_MASTERS=BAD_COMMAND_URL))
    assert proc.returncode == 2, proc.stderr
    assert "masters[0]" in proc.stderr
    assert "alice:***@" in proc.stderr
    assert_hidden(proc.stdout + proc.stderr)


@pytest.mark.parametrize("subcommand", ["run", "status"])
def test_the_command_hides_passwords_beside_an_empty_url(subcommand):
    listed = f"redis://:{SECRET}@127.0.0.1:1/0,,redis://127.0.0.1:2/0"
    proc = cli(*_command(subcommand), environ=env(HIREDLOCK_MASTERS=listed))
    assert proc.returncode == 2, proc.stderr
    assert "empty URL" in proc.stderr
    assert_hidden(proc.stdout + proc.stderr)


def test_the_command_hides_a_password_in_an_unrecognised_argument():
    proc = cli("status", "n", f"redis://:{SECRET}@127.0.0.1:1/0")
    assert proc.returncode == 2
    assert "unrecognized arguments" in proc.stderr
    assert_hidden(proc.stdout + proc.stderr)


@pytest.mark.parametrize("subcommand", ["run", "status"])
def test_the_command_hides_the_password_of_unreachable_masters(subcommand, redis_factory):
    (server,) = redis_factory(1)
    port = server.port
    server.kill()
    url = f"redis://alice:{SECRET}@127.0.0.1:{port}/0"
    proc = cli(*_command(subcommand), environ=env(HIREDLOCK_MASTERS=url))
    assert proc.returncode == 69, proc.stdout + proc.stderr
    assert_hidden(proc.stdout + proc.stderr)


def test_demo_sellers_do_not_carry_passwords_on_their_command_line(redis_factory):
    pytest.importorskip("rich")
    servers = redis_factory(3)
    for server in servers:
        server.set_password(SECRET)
    urls = ",".join(f"redis://:{SECRET}@127.0.0.1:{server.port}/0" for server in servers)
    proc = start("demo", "--masters", urls, "--workers", "2", "--tickets", "30")
    sellers_seen = False
    try:
        while proc.poll() is None:
            # Every local user can read every command line (ps); the demo's own is the user's,
            # and so is that of a child between fork() and exec(), which still shows it. (Read
            # here, not once at the start: right after Popen the demo may not have exec'd its
            # interpreter yet.)
            demo_cmdline = _cmdline(proc.pid)
            # Judge the command line that mentioned the secret, not one read again after it:
            # the forked child may exec its seller in between (its new line has no secret).
            for pid, cmdline in command_lines_mentioning(SECRET).items():
                assert pid == proc.pid or cmdline == demo_cmdline, (pid, cmdline)
            sellers_seen = sellers_seen or bool(processes_mentioning(f'"parent": {proc.pid}'))
            time.sleep(0.02)
        out, err = proc.communicate(timeout=30)
    finally:
        stop(proc)
    assert proc.returncode == 0, out + err
    assert sellers_seen
    assert_hidden(out + err)


def _cmdline(pid: int) -> str | None:
    """A process's command line, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return command_line_text(f.read())
    except OSError:
        return None
