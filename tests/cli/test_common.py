"""The hiredlock command: what every subcommand shares (parsing, masters, one-line errors).

Every test drives the installed console script in a subprocess (tests/support/cli_support.py).
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from cli_support import (
    UNREACHABLE,
    USAGE,
    cli,
    env,
    one_line_error,
)

pytestmark = pytest.mark.subprocess


# -- parsing and errors ---------------------------------------------------------------------------


def test_help_names_every_subcommand():
    proc = cli("--help")
    assert proc.returncode == 0
    for name in ("demo", "run", "servers", "status", "HIREDLOCK_MASTERS"):
        assert name in proc.stdout


@pytest.mark.parametrize("command", [(), ("run",), ("status",), ("demo",)])
def test_help_lists_every_url_form(command):
    proc = cli(*command, "--help")
    assert proc.returncode == 0, proc.stderr
    text = " ".join(proc.stdout.split())  # argparse wraps the epilog
    for form in ("redis://", "rediss://", "unix://", "redis+sentinel://", "rediss+sentinel://"):
        assert form in text, (form, text)


def test_a_sentinel_url_keeps_its_comma_separated_sentinels():
    sentinels = "127.0.0.1:1,127.0.0.1:2"  # nobody listens there: unknown, not a usage error
    urls = f"redis+sentinel://{sentinels}/lock-a/0,redis://127.0.0.1:3/0"
    proc = cli("status", "name", "--masters", urls)
    assert proc.returncode == UNREACHABLE, proc.stdout + proc.stderr
    assert f"redis+sentinel://{sentinels}/lock-a/0" in proc.stdout
    assert "only 0 of 2 masters answered" in proc.stdout


def test_a_cluster_url_keeps_its_comma_separated_nodes():
    from hiredlock.cli.masters import master_urls

    nodes = "127.0.0.1:1,127.0.0.1:2"
    urls, source = master_urls([f"redis+cluster://{nodes},redis://127.0.0.1:3/0"])
    assert urls == [f"redis+cluster://{nodes}", "redis://127.0.0.1:3/0"] and source == "--masters"


def test_python_dash_m_is_the_same_command():
    proc = subprocess.run(
        [sys.executable, "-m", "hiredlock", "--version"], capture_output=True, text=True, env=env()
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("hiredlock ")


def test_no_subcommand_prints_help_and_fails():
    proc = cli()
    assert proc.returncode == USAGE
    assert "usage: hiredlock" in proc.stderr


def test_unknown_subcommand():
    proc = cli("frobnicate")
    assert proc.returncode == USAGE
    assert "frobnicate" in one_line_error(proc.stderr)


@pytest.mark.parametrize(
    "args",
    [
        ("run", "name", "--bogus", "--", "true"),
        ("status", "name", "--bogus"),
        ("servers", "--bogus"),
        ("demo", "--bogus"),
    ],
    ids=["run", "status", "servers", "demo"],
)
def test_unknown_option_is_one_line_naming_the_subcommand(args):
    proc = cli(*args)
    assert proc.returncode == USAGE
    line = one_line_error(proc.stderr)
    assert "--bogus" in line
    assert f"hiredlock {args[0]} --help" in line


@pytest.mark.parametrize(
    "args",
    [
        ("run", "name", "--ttl", "soon", "--", "true"),
        ("run", "name", "--wait", "-1", "--", "true"),
        ("servers", "--count", "0"),
        ("demo", "--workers", "1"),
        ("demo", "--tickets", "many"),
    ],
    ids=["ttl", "wait", "count", "workers", "tickets"],
)
def test_bad_numbers(args):
    proc = cli(*args)
    assert proc.returncode == USAGE
    one_line_error(proc.stderr)


@pytest.mark.parametrize(
    "subcommand, url",
    [
        ("status", "not-a-url"),
        ("status", "redis://127.0.0.1:99999/0"),
        ("status", "rediss://127.0.0.1:6379/0?ssl_ca_certs=/no/such/ca.pem"),
        ("run", "redis://h:1/x"),
        ("demo", "http://127.0.0.1:6379"),
    ],
)
def test_bad_url_names_the_master(subcommand, url):
    option = ("--masters", f"redis://127.0.0.1:1/0,{url}")
    args = {
        "run": ("run", "n", *option, "--", "true"),
        "status": ("status", "n", *option),
        "demo": ("demo", *option),
    }
    proc = cli(*args[subcommand])
    assert proc.returncode == USAGE
    line = one_line_error(proc.stderr)
    assert "--masters" in line
    assert "masters[1]" in line


def test_bad_url_from_the_environment_names_it():
    proc = cli("status", "n", environ=env(HIREDLOCK_MASTERS="redis://127.0.0.1:1/0,bogus"))
    assert proc.returncode == USAGE
    line = one_line_error(proc.stderr)
    assert "HIREDLOCK_MASTERS" in line
    assert "masters[1]" in line


@pytest.mark.parametrize(
    "args", [("run", "n", "--", "true"), ("status", "n")], ids=["run", "status"]
)
def test_no_masters(args):
    proc = cli(*args)
    assert proc.returncode == USAGE
    line = one_line_error(proc.stderr)
    assert "--masters" in line
    assert "HIREDLOCK_MASTERS" in line


def test_empty_url_in_the_list():
    proc = cli("status", "n", "--masters", "redis://127.0.0.1:1/0,,redis://127.0.0.1:2/0")
    assert proc.returncode == USAGE
    assert "empty URL" in one_line_error(proc.stderr)


def test_duplicate_master():
    proc = cli(
        "status", "n", "--masters", "redis://127.0.0.1:1/0", "--masters", "redis://127.0.0.1:1"
    )
    assert proc.returncode == USAGE
    assert "duplicates" in one_line_error(proc.stderr)


def test_masters_come_from_the_option_repeated_or_the_environment(masters5, key):
    a, b, c = (s.url for s in masters5[:3])
    for environ, args in [
        (env(), ("--masters", f"{a},{b}", "--masters", c)),
        (env(HIREDLOCK_MASTERS=f" {a} , {b},{c} "), ()),
        (env(HIREDLOCK_MASTERS="redis://127.0.0.1:1/0"), ("--masters", f"{a},{b},{c}")),
    ]:
        proc = cli("status", key, *args, environ=environ)
        assert proc.returncode == 1, proc.stderr  # 1: not held (and every master answered)
        assert proc.stdout.count(" no ") == 3, proc.stdout
