"""`hiredlock run NAME -- COMMAND`: a distributed flock(1), run as a subprocess on real masters."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time

import pytest
from cli_support import (
    BUSY,
    LOST,
    UNREACHABLE,
    USAGE,
    cli,
    env,
    masters,
    one_line_error,
    start,
    stop,
    wait_for,
)
from support import assert_no_key, values

from hiredlock import Redlock

pytestmark = pytest.mark.subprocess


def python(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def held_everywhere(servers, key) -> bytes | None:
    """The token when every master holds the same one, else None."""
    found = values(servers, key)
    return found[0] if found[0] is not None and len(set(found)) == 1 else None


def test_runs_the_command_with_its_io_and_status_then_releases(masters5, key):
    code = """
        import sys
        print(sys.stdin.read().upper(), end="")
        print("to stderr", file=sys.stderr)
        sys.exit(7)
    """
    proc = cli("run", key, *masters(masters5), "--", *python(code), input="hello\n", stdin=None)
    assert proc.returncode == 7
    assert proc.stdout == "HELLO\n"
    assert proc.stderr == "to stderr\n"
    assert_no_key(masters5, key)


def test_three_at_once_run_the_command_once(masters5, key, tmp_path):
    runs = tmp_path / "runs"
    code = f"""
        import time
        with open({str(runs)!r}, "a") as f:
            f.write("ran\\n")
        time.sleep(2)  # the others try (and give up) meanwhile
    """
    procs = [
        start("run", key, *masters(masters5), "--wait", "0", "--", *python(code)) for _ in range(3)
    ]
    errors = [proc.communicate(timeout=30)[1] for proc in procs]
    assert sorted(proc.returncode for proc in procs) == [0, BUSY, BUSY], errors
    assert runs.read_text() == "ran\n"
    assert sorted("is busy" in err for err in errors) == [False, True, True]
    assert_no_key(masters5, key)


def test_waits_for_a_busy_lock_then_runs(masters5, key):
    first = start("run", key, *masters(masters5), "--", *python("import time; time.sleep(1)"))
    try:
        wait_for(lambda: held_everywhere(masters5, key), what="the first run to hold the lock")
        began = time.monotonic()
        second = cli("run", key, *masters(masters5), "--wait", "10", "--", "echo", "second")
        assert second.returncode == 0, second.stderr
        assert second.stdout == "second\n"
        assert time.monotonic() - began > 0.3  # it did wait for the first one
        first.communicate(timeout=10)
        assert first.returncode == 0
    finally:
        stop(first)


def test_busy_quiet_says_nothing(masters5, key):
    with Redlock([s.url for s in masters5]) as redlock, redlock.lock(key, ttl=10):
        proc = cli("run", key, *masters(masters5), "-q", "--", "echo", "ran")
        assert proc.returncode == BUSY
        assert proc.stdout == proc.stderr == ""


def test_a_command_that_outlives_three_ttls_keeps_the_lock(masters5, key):
    proc = start("run", key, *masters(masters5), "--ttl", "1", "--", "sleep", "5")
    try:
        token = wait_for(lambda: held_everywhere(masters5, key), what="the lock")
        time.sleep(3.1)  # more than 3 x ttl after the acquire
        rival = cli("run", key, *masters(masters5), "--", "echo", "rival")
        assert rival.returncode == BUSY, rival.stderr
        assert held_everywhere(masters5, key) == token  # the same holder, renewed
        assert all(0 < s.admin().pttl(key) <= 1000 for s in masters5)
        proc.communicate(timeout=10)
        assert proc.returncode == 0, proc.stderr
        assert_no_key(masters5, key)
    finally:
        stop(proc)


def test_sigterm_reaches_the_command_and_the_lock_is_released(masters5, key, tmp_path):
    ready, got = tmp_path / "ready", tmp_path / "got"
    code = f"""
        import signal, sys, time
        def on_term(signum, frame):
            open({str(got)!r}, "w").write(signal.Signals(signum).name)
            sys.exit(3)
        signal.signal(signal.SIGTERM, on_term)
        open({str(ready)!r}, "w").write("ready")
        time.sleep(30)
    """
    proc = start("run", key, *masters(masters5), "--", *python(code))
    try:
        wait_for(ready.exists, what="the command to start")
        assert held_everywhere(masters5, key)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=10)
        assert proc.returncode == 3  # the command's own status
        assert got.read_text() == "SIGTERM"
        assert values(masters5, key) == [None] * 5  # released on every master before exiting
    finally:
        stop(proc)


def test_losing_a_majority_terminates_the_command(masters5, key, tmp_path):
    pidfile = tmp_path / "pid"
    code = f"""
        import os, time
        open({str(pidfile)!r}, "w").write(str(os.getpid()))
        time.sleep(60)
    """
    proc = start("run", key, *masters(masters5), "--ttl", "1", "--", *python(code))
    try:
        wait_for(lambda: pidfile.exists() and pidfile.read_text(), what="the command")
        command_pid = int(pidfile.read_text())
        began = time.monotonic()
        for server in masters5[:3]:
            server.kill()
        _out, err = proc.communicate(timeout=15)
        assert proc.returncode == LOST, err
        assert time.monotonic() - began < 5
        assert "lost" in one_line_error(err)
        with pytest.raises(ProcessLookupError):
            os.kill(command_pid, 0)  # terminated, and reaped
    finally:
        stop(proc)


def test_a_lock_whose_keys_were_deleted_says_what_the_masters_answered(engine, masters5, key):
    proc = start(
        "run", key, *masters(masters5), "--ttl", "1", "--", "sleep", "60",
        environ=env(HIREDLOCK_IMPL=engine),
    )  # fmt: skip
    try:
        wait_for(lambda: held_everywhere(masters5, key), what="the lock")
        for server in masters5[:3]:
            server.admin().delete(key)  # the masters answer, but the key is not ours any more
        _out, err = proc.communicate(timeout=15)
        assert proc.returncode == LOST, err
        line = one_line_error(err)
        assert "no master answered" not in line
        assert "3 of 5 masters answered that the key is no longer ours" in line, line
    finally:
        stop(proc)


def test_sigint_while_waiting_gives_up(masters5, key):
    with Redlock([s.url for s in masters5]) as redlock, redlock.lock(key, ttl=10):
        proc = start("run", key, *masters(masters5), "--wait", "30", "--", "echo", "ran")
        try:
            time.sleep(1.0)  # up and waiting for the lock
            proc.send_signal(signal.SIGINT)
            out, err = proc.communicate(timeout=5)
            assert proc.returncode == 128 + signal.SIGINT
            assert out == ""
            assert "SIGINT" in one_line_error(err)
        finally:
            stop(proc)


def test_unreachable_masters(redis_factory, key, tmp_path):
    urls = ",".join(f"redis://127.0.0.1:{port}/0" for port in _closed_ports(3))
    marker = tmp_path / "ran"
    proc = cli("run", key, "--masters", urls, "--", "touch", str(marker))
    assert proc.returncode == UNREACHABLE
    assert "unreachable" in one_line_error(proc.stderr)
    assert not marker.exists()


def test_command_not_found_or_not_executable(masters5, key, tmp_path):
    proc = cli("run", key, *masters(masters5), "--", str(tmp_path / "nothing-here"))
    assert proc.returncode == 127
    assert "not found" in one_line_error(proc.stderr)
    plain = tmp_path / "plain.txt"
    plain.write_text("not a program\n")
    proc = cli("run", key, *masters(masters5), "--", str(plain))
    assert proc.returncode == 126
    one_line_error(proc.stderr)
    assert_no_key(masters5, key)


def test_a_command_killed_by_a_signal_gives_128_plus_n(masters5, key):
    proc = cli("run", key, *masters(masters5), "--", "sh", "-c", "kill -KILL $$")
    assert proc.returncode == 128 + signal.SIGKILL
    assert_no_key(masters5, key)


def test_no_command(masters5, key):
    for tail in ((), ("--",)):
        proc = cli("run", key, *masters(masters5), *tail)
        assert proc.returncode == USAGE
        assert "COMMAND" in one_line_error(proc.stderr)


def test_too_short_a_ttl_is_a_usage_error(masters5, key):
    proc = cli("run", key, *masters(masters5), "--ttl", "0.001", "--", "true")
    assert proc.returncode == USAGE
    assert "ttl" in one_line_error(proc.stderr)


def _closed_ports(n: int) -> list[int]:
    """Loopback ports nobody listens on (bound, then closed, so they are free right now)."""
    import socket

    socks = [socket.socket() for _ in range(n)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]
    finally:
        for sock in socks:
            sock.close()


def test_the_command_gets_our_descriptors_but_not_the_masters_sockets(masters5, key):
    code = "import os; print(sorted(int(fd) for fd in os.listdir('/proc/self/fd')))"
    read_end, write_end = os.pipe()
    try:
        proc = cli("run", key, *masters(masters5), "--", *python(code), pass_fds=(read_end,))
    finally:
        os.close(read_end)
        os.close(write_end)
    assert proc.returncode == 0, proc.stderr
    fds = [int(fd) for fd in proc.stdout.strip("[]\n").split(",")]
    assert read_end in fds  # passed on, as flock(1) does
    others = [fd for fd in fds if fd > 2 and fd != read_end]
    assert len(others) <= 1, fds  # only the listing's own descriptor: no sockets of ours
