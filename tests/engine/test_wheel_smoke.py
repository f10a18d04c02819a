"""Smoke test of an installed hiredlock (a wheel), with no redis-server: cibuildwheel's test-command
and `make wheel-check` run it against the installed package, from outside the source tree.

    python tests/engine/test_wheel_smoke.py  # reports the engine, the hiredis version, the paths
    python -m pytest tests/engine/test_wheel_smoke.py

Environment:
  HIREDLOCK_NO_EXTENSIONS=1       the pure wheel: the native engine must be absent.
  HIREDLOCK_TEST_INSTALLED=1      hiredlock must be imported from an installation, not from src/.
  HIREDLOCK_EXPECT_HIREDIS=X.Y.Z  the extension must have been built against that hiredis.

A lock is taken and released on each engine against a minimal fake Redis (a thread speaking just
enough RESP), so the linked hiredis really connects, writes and parses replies.
"""

from __future__ import annotations

import importlib
import os
import re
import socket
import sys
import threading

import pytest

sys.path.insert(
    0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "support")
)

from support import no_extensions

import hiredlock
from hiredlock import QuorumUnreachable, Redlock

ENGINES = ["python"] if no_extensions() else ["native", "python"]


def _installed_from_a_wheel() -> bool:
    return os.environ.get("HIREDLOCK_TEST_INSTALLED", "").strip() == "1"


def report() -> str:
    lines = [f"hiredlock {hiredlock.__version__} from {os.path.dirname(hiredlock.__file__)}"]
    lines.append(f"engines: {', '.join(hiredlock.available_backends())}")
    try:
        import hiredlock._native as native
    except ImportError as exc:
        lines.append(f"native engine: not loaded ({exc})")
    else:
        lines.append(f"native engine: {native.__file__} on hiredis {native.HIREDIS_VERSION}")
    return "\n".join(lines)


class FakeRedis:
    """A loopback server answering SET with +OK, EVALSHA/EVAL with :1 and anything else with +OK."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.commands: list[bytes] = []
        self._conns: list[socket.socket] = []
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self._conns.append(conn)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        reader = conn.makefile("rb")
        try:
            while True:
                line = reader.readline()
                if not line:
                    return
                if not line.startswith(b"*"):
                    raise ValueError(f"not a RESP array: {line!r}")
                argv = []
                for _ in range(int(line[1:])):
                    size = int(reader.readline()[1:])
                    argv.append(reader.read(size + 2)[:-2])
                name = argv[0].upper()
                self.commands.append(name)
                conn.sendall(b":1\r\n" if name in (b"EVALSHA", b"EVAL") else b"+OK\r\n")
        except (OSError, ValueError):
            return
        finally:
            reader.close()

    def close(self) -> None:
        self._stop = True
        self.sock.close()
        for c in self._conns:
            c.close()


@pytest.fixture
def fake_redis():
    server = FakeRedis()
    yield server
    server.close()


def test_installed_package_is_used():
    if not _installed_from_a_wheel():
        pytest.skip("HIREDLOCK_TEST_INSTALLED=1 is set only when testing an installed wheel")
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    package = os.path.abspath(hiredlock.__file__)
    assert not package.startswith(os.path.join(here, "src") + os.sep), package
    assert "site-packages" in package or "dist-packages" in package, package


def test_engine_loaded():
    print(report())
    if no_extensions():
        if not _installed_from_a_wheel():
            return  # a development tree may hold a built extension all the same
        assert hiredlock.available_backends() == ("python",)
        with pytest.raises(ImportError):
            importlib.import_module("hiredlock._native")
        return
    import hiredlock._native as native

    assert hiredlock.available_backends() == ("native", "python")
    if not os.environ.get("HIREDLOCK_IMPL"):
        assert Redlock(["redis://127.0.0.1:1/0"]).backend == "native"
    assert native.__file__.endswith((".so", ".pyd")), native.__file__


@pytest.mark.skipif(no_extensions(), reason="native engine not built: HIREDLOCK_NO_EXTENSIONS=1")
def test_hiredis_version():
    import hiredlock._native as native

    assert re.fullmatch(r"\d+\.\d+\.\d+", native.HIREDIS_VERSION), native.HIREDIS_VERSION
    expected = os.environ.get("HIREDLOCK_EXPECT_HIREDIS", "").strip()
    if expected:
        assert expected == native.HIREDIS_VERSION


@pytest.mark.parametrize("backend", ENGINES)
def test_lock_round_trip(backend, fake_redis):
    with Redlock([fake_redis.url], master_timeout=2.0, backend=backend) as redlock:
        assert redlock.backend == backend
        lock = redlock.lock("wheel-smoke", ttl=30)
        assert lock.acquire(blocking=False)
        assert lock.held
        lock.release()
    assert b"SET" in fake_redis.commands
    assert b"EVALSHA" in fake_redis.commands or b"EVAL" in fake_redis.commands


@pytest.mark.parametrize("backend", ENGINES)
def test_refused_connection_is_a_vote(backend):
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again below: nothing listens there
    url = f"redis://127.0.0.1:{port}/0"
    with Redlock([url], retry_count=1, backend=backend) as redlock:
        lock = redlock.lock("wheel-smoke", ttl=30)
        with pytest.raises(QuorumUnreachable):
            lock.acquire(blocking=False)


if __name__ == "__main__":
    print(report())
