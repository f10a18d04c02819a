"""`hiredlock demo`: the ticket race end to end, its cleanup (also on Ctrl-C), and bad input."""

from __future__ import annotations

import os
import signal
import time

import pytest
from cli_support import (
    UNREACHABLE,
    Lines,
    cli,
    env,
    masters,
    needs_rich,
    one_line_error,
    processes_mentioning,
    start,
    stop,
)

import hiredlock

pytestmark = pytest.mark.subprocess

NATIVE = "native" in hiredlock.available_backends()


def leftovers(tmp_path, demo_pid: int) -> list[int]:
    """Servers (working in a dir under TMPDIR) and sellers (their config names the demo)."""
    return processes_mentioning(str(tmp_path)) + processes_mentioning(f'"parent": {demo_pid}')


@needs_rich
def test_the_race_on_its_own_servers(tmp_path):
    proc = start("demo", "--workers", "3", "--tickets", "60", environ=env(TMPDIR=str(tmp_path)))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, out + err
    assert "Traceback" not in err
    assert "oversold by" in out  # round 1
    assert "stalled at" in out and "PTTL -1" in out  # round 2
    assert "sold 60 of 60, none oversold" in out  # round 3
    assert "went on" in out  # the dead seller's lock expired
    if NATIVE:
        assert "native engine" in out
    assert all(len(line) <= 80 for line in out.splitlines())
    assert leftovers(tmp_path, proc.pid) == []
    assert list(tmp_path.iterdir()) == []


@needs_rich
def test_ctrl_c_in_round_3_leaves_nothing_behind(tmp_path):
    # The demo in a process group of its own, signalled as a whole: what Ctrl-C on a terminal does.
    proc = start(
        "demo",
        "--workers",
        "3",
        "--tickets",
        "400",
        environ=env(TMPDIR=str(tmp_path)),
        start_new_session=True,
    )
    try:
        lines = Lines(proc.stdout)
        lines.wait_for("Round 3", timeout=60)
        time.sleep(0.8)  # the sellers are up and selling (or waiting for the dead one's lock)
        assert leftovers(tmp_path, proc.pid)  # servers and sellers are running
        os.killpg(proc.pid, signal.SIGINT)
        assert proc.wait(timeout=30) == 128 + signal.SIGINT
        assert "SIGINT: stopping" in lines.text()
        assert "Traceback" not in proc.stderr.read()
        assert leftovers(tmp_path, proc.pid) == []
        assert list(tmp_path.iterdir()) == []
    finally:
        stop(proc)


@needs_rich
def test_the_race_on_given_masters_leaves_no_keys(masters5):
    proc = cli("demo", *masters(masters5), "--workers", "2", "--tickets", "30", timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "sold 30 of 30, none oversold" in proc.stdout
    for server in masters5:
        assert server.admin().keys("hiredlock-demo:*") == []


@needs_rich
def test_unreachable_masters(masters5):
    for server in masters5[:3]:
        server.kill()
    proc = cli("demo", *masters(masters5))
    assert proc.returncode == UNREACHABLE
    assert "unreachable" in one_line_error(proc.stderr)


def test_without_rich_it_says_how_to_install_it(tmp_path):
    fake = tmp_path / "rich"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('rich is not installed')\n")
    proc = cli("demo", environ=env(PYTHONPATH=str(tmp_path)))
    assert proc.returncode == 1
    assert "pip install 'hiredlock[cli]'" in one_line_error(proc.stderr)
