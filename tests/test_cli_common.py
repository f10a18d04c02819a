"""The hiredlock command: what every subcommand shares (parsing, masters, one-line errors).

Also the helpers the other test_cli_* modules import: every test drives the installed console
script (`hiredlock`, next to the Python running the tests) in a subprocess.
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

pytestmark = pytest.mark.subprocess

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
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{name}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
            cwd = os.readlink(f"/proc/{name}/cwd")
        except OSError:
            continue
        if state != "Z" and (text in cmdline or cwd.startswith(text)):
            found.append(int(name))
    return found


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
