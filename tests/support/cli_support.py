"""Helpers of the tests of the hiredlock command (tests/cli/) and of the tests that run it
(tests/api/test_redaction.py): every such test drives the installed console script (`hiredlock`,
next to the Python running the tests) in a subprocess.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

USAGE, UNREACHABLE, BUSY, LOST = 2, 69, 75, 79

# The demo draws with rich, from the cli extra: `pip install -e '.[cli]'` (make demo does it).
needs_rich = pytest.mark.skipif(
    importlib.util.find_spec("rich") is None,
    reason="rich (the cli extra) is not installed: pip install -e '.[cli]'",
)


def _script() -> str:
    beside = os.path.join(os.path.dirname(sys.executable), "hiredlock")
    found = beside if os.access(beside, os.X_OK) else shutil.which("hiredlock")
    if not found:
        pytest.fail(
            "the hiredlock console script is not installed (pip install -e '.[cli]')",
            pytrace=False,
        )
    return found


HIREDLOCK = _script()


def env(**changes: str | None) -> dict:
    """The environment for the command: no HIREDLOCK_MASTERS unless given, plus `changes`."""
    out = {k: v for k, v in os.environ.items() if k not in ("HIREDLOCK_MASTERS", "HIREDLOCK_IMPL")}
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def cli(*args: str, timeout: float = 30, environ: dict | None = None, **kw):
    """Runs `hiredlock *args` to its end; a CompletedProcess with text stdout and stderr."""
    kw.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.run(
        [HIREDLOCK, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environ if environ is not None else env(),
        **kw,
    )


def start(*args: str, environ: dict | None = None, **kw) -> subprocess.Popen:
    """Starts `hiredlock *args` without waiting (stdout and stderr piped, as text)."""
    kw.setdefault("stdin", subprocess.DEVNULL)
    kw.setdefault("stdout", subprocess.PIPE)
    kw.setdefault("stderr", subprocess.PIPE)
    return subprocess.Popen(
        [HIREDLOCK, *args], text=True, env=environ if environ is not None else env(), **kw
    )


def masters(servers) -> tuple[str, str]:
    return ("--masters", ",".join(s.url for s in servers))


def one_line_error(stderr: str) -> str:
    """The command failed with exactly one line on stderr and no traceback; that line."""
    lines = stderr.strip().splitlines()
    assert "Traceback" not in stderr, stderr
    assert len(lines) == 1, stderr
    assert lines[0].startswith("hiredlock: "), lines[0]
    return lines[0]


def wait_for(predicate, timeout: float = 10.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def processes_mentioning(text: str) -> list[int]:
    """Pids of live processes whose command line contains `text`, or whose working directory
    is under it (redis-server rewrites its command line, but works in its --dir)."""
    return list(command_lines_mentioning(text))


def command_lines_mentioning(text: str) -> dict[int, str]:
    """The command line of each live process that mentions `text` (as `processes_mentioning`
    finds them), as read when it matched: a forked child that execs a moment later shows a
    different one, so a caller judging the match must judge this copy."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = command_line_text(f.read())
            with open(f"/proc/{name}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            cwd = os.readlink(f"/proc/{name}/cwd")
        except OSError:
            continue
        if state != "Z" and (text in cmdline or cwd.startswith(text)):
            found[int(name)] = cmdline
    return found


def command_line_text(raw: bytes) -> str:
    """/proc/PID/cmdline's NUL-separated arguments as one line."""
    return raw.replace(b"\0", b" ").decode(errors="replace")


class Lines:
    """Collects a pipe's lines in a thread, so a test can wait for one without blocking."""

    def __init__(self, pipe) -> None:
        self.lines: list[str] = []
        self.thread = threading.Thread(target=self._read, args=(pipe,), daemon=True)
        self.thread.start()

    def _read(self, pipe) -> None:
        for line in pipe:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, prefix: str, timeout: float = 30.0) -> str:
        """The first line that starts with `prefix` (leading blanks ignored)."""

        def found():
            return next((line for line in self.lines if line.lstrip().startswith(prefix)), None)

        return wait_for(found, timeout, what=f"a line starting with {prefix!r}: {self.lines}")

    def text(self) -> str:
        self.thread.join(timeout=30)
        return "\n".join(self.lines)


def stop(proc: subprocess.Popen, signum: int = signal.SIGKILL) -> None:
    """Test cleanup: signal a command we started if it still runs, and reap it."""
    if proc.poll() is None:
        proc.send_signal(signum)
    proc.communicate(timeout=30)
