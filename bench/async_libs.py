"""asyncio locks for bench/test_async.py: T tasks on one event loop, each cycling its own name.

`open_tasks(lib, ports, tasks, prefix)` returns a Cycler (see libs.py) whose `run(k)` has each of
the T tasks do k cycles (a non-blocking acquire that must succeed, then a release) on its own name
`prefix:i`; a round ends when the last task is done. The tasks are started once and wait for the
next round on a future, so task creation is never timed; lock objects are made once per task,
outside the timed code, and the clients are shared by all tasks of the loop (one AsyncRedlock; one
redis-py client per master whose pool has a connection per task, so no task waits for one:
redis-py's asyncio pool refuses more than 100 connections unless told `max_connections`).
Connections are opened by the warm-up, never inside a timed round. Every row runs on the default
asyncio event loop.

redis-py picks its reply parser itself: hiredis when the `hiredis` package is importable, else its
pure-Python one; it has no public switch. So the rows "with hiredis" run in a second virtualenv
(bench/.venv-hiredis: the same redis-py version plus hiredis, made by `make bench`), in a worker
process driven over a pipe by `RemoteCycler` (`python bench/async_libs.py SPEC` is that worker).
The main venv has no hiredis (checked per row through redis-py's `redis.utils.HIREDIS_AVAILABLE`).
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import time

from libs import HOST, TTL_S, Cycler, HiredlockCycler, NotAcquired, open_cycle

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
HIREDIS_PYTHON = os.environ.get(
    "BENCH_HIREDIS_PYTHON", os.path.join(BENCH_DIR, ".venv-hiredis", "bin", "python")
)

# Rows of the asyncio table: library -> masters counts it supports.
ASYNC_LIBS = {
    "aio-native": (1, 5),
    "aio-python": (1, 5),
    "redis-py-aio-hiredis": (1,),
    "redis-py-aio": (1,),
    "pottery-aio": (1, 5),
    "aio-floor": (1,),
}
# The floor has a socket per task (FloorTasks): not run with more tasks than this.
FLOOR_MAX_TASKS = 100
# Libraries run in the hiredis venv's worker: row name -> the library run there.
REMOTE = {"redis-py-aio-hiredis": "redis-py-aio", "redis-py-hiredis": "redis-py"}

ASYNC_LABELS = {
    "aio-native": "hiredlock.aio native",
    "aio-python": "hiredlock.aio python",
    "redis-py-aio-hiredis": "redis-py asyncio Lock, hiredis",
    "redis-py-aio": "redis-py asyncio Lock, pure-Python parser",
    "pottery-aio": "pottery AIORedlock",
    "redis-py-hiredis": "redis-py Lock, hiredis",
    "aio-floor": "asyncio floor: no lock, the cycle's two round trips alone",
}


def hiredis_parser() -> bool:
    """Whether redis-py in this interpreter parses replies with hiredis (its own public flag)."""
    from redis.utils import HIREDIS_AVAILABLE

    return bool(HIREDIS_AVAILABLE)


# -- the tasks of one loop ------------------------------------------------------------------------


class TaskCycler(Cycler):
    """T tasks on a private event loop; subclasses make the shared client (`_open`), one cycle
    function per task (`_cycle_fn`) and close the client (`_close`)."""

    MAX_FAILURE_RATE = HiredlockCycler.MAX_FAILURE_RATE

    def __init__(self, lib: str, ports, tasks: int, prefix: str):
        self.lib = lib
        self.ports = list(ports)
        self.tasks = tasks
        self.cycles = 0
        self.failures: list[str] = []
        self.errors: list[BaseException] = []
        self.loop = asyncio.new_event_loop()
        self.workers: list[asyncio.Task] = []
        self.loop.run_until_complete(self._start([f"{prefix}:{i}" for i in range(tasks)]))

    async def _start(self, names) -> None:
        await self._open()
        loop = asyncio.get_running_loop()
        self._go = loop.create_future()
        self._done = loop.create_future()
        self._left = 0
        fns = [self._cycle_fn(name) for name in names]
        self.workers = [loop.create_task(self._work(fn)) for fn in fns]
        await asyncio.sleep(0)  # every task now waits on self._go

    async def _work(self, cycle) -> None:
        while True:
            k = await self._go
            if k is None:
                return
            try:
                for _ in range(k):
                    await cycle()
            except BaseException as exc:
                self.errors.append(exc)
            self._left -= 1
            if self._left == 0 and not self._done.done():
                self._done.set_result(None)

    async def _round(self, k: int) -> None:
        loop = asyncio.get_running_loop()
        go, self._go = self._go, loop.create_future()
        self._done = loop.create_future()
        self._left = self.tasks
        go.set_result(k)
        await self._done

    def run(self, k: int) -> None:
        self.loop.run_until_complete(self._round(k))
        self.cycles += k * self.tasks
        if self.errors:
            raise self.errors[0]
        if len(self.failures) > max(10, self.MAX_FAILURE_RATE * self.cycles):
            raise NotAcquired(
                f"{self.lib}: {len(self.failures)} failed cycles of about {self.cycles}; "
                f"last: {self.failures[-1]}"
            )

    def close(self) -> None:
        async def stop():
            self._go.set_result(None)
            await asyncio.gather(*self.workers, return_exceptions=True)
            await self._close()

        try:
            self.loop.run_until_complete(stop())
        finally:
            self.loop.close()

    async def _open(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def _cycle_fn(self, name: str):  # pragma: no cover - interface
        raise NotImplementedError

    async def _close(self) -> None:
        pass


class HiredlockTasks(TaskCycler):
    """hiredlock.aio: one AsyncRedlock shared by all tasks. A failed cycle (a round past
    master_timeout on a busy machine) is counted, not raised, as libs.HiredlockCycler does."""

    def __init__(self, engine: str, ports, tasks: int, prefix: str):
        self.engine = engine
        super().__init__(f"aio-{engine}", ports, tasks, prefix)

    async def _open(self) -> None:
        from hiredlock.aio import AsyncRedlock

        self.redlock = AsyncRedlock(
            [f"redis://{HOST}:{p}/0" for p in self.ports], backend=self.engine
        )
        backend = getattr(self.redlock, "backend", self.engine)
        assert backend == self.engine, backend

    def _cycle_fn(self, name: str):
        from hiredlock import LockLost, LockNotAcquired

        lock = self.redlock.lock(name, ttl=TTL_S)
        failed = self.failures.append

        async def cycle():
            try:
                acquired = await lock.acquire(blocking=False)
            except LockNotAcquired as exc:  # QuorumUnreachable: every master TIMEOUT
                failed(f"acquire: {exc}")
                return
            if not acquired:
                failed(f"acquire: {getattr(lock, 'last_votes', False)}")
                return
            try:
                await lock.release()
            except LockLost as exc:
                failed(f"release: {exc}")

        return cycle

    async def _close(self) -> None:
        await self.redlock.aclose()


class RedisPyTasks(TaskCycler):
    """redis-py's asyncio Lock, N=1: one client, a Lock object per task."""

    async def _open(self) -> None:
        from redis.asyncio import Redis

        (port,) = self.ports
        self.client = Redis(host=HOST, port=port, max_connections=max(100, self.tasks))

    def _cycle_fn(self, name: str):
        lock = self.client.lock(name, timeout=TTL_S)

        async def cycle():
            if not await lock.acquire(blocking=False):
                raise NotAcquired(self.lib)
            await lock.release()

        return cycle

    async def _close(self) -> None:
        await self.client.aclose()


class PotteryTasks(TaskCycler):
    """pottery's AIORedlock: one asyncio redis-py client per master, an AIORedlock per task."""

    async def _open(self) -> None:
        from redis.asyncio import Redis

        self.clients = [
            Redis(host=HOST, port=p, max_connections=max(100, self.tasks)) for p in self.ports
        ]

    def _cycle_fn(self, name: str):
        from pottery import AIORedlock

        lock = AIORedlock(key=name, masters=set(self.clients), auto_release_time=TTL_S)

        async def cycle():
            if not await lock.acquire(blocking=False):
                raise NotAcquired(self.lib)
            await lock.release()

        return cycle

    async def _close(self) -> None:
        for client in self.clients:
            await client.aclose()


class FloorTasks(TaskCycler):
    """Not a lock: what any asyncio client pays on this loop for the cycle's two round trips, and
    nothing else (bench/count_instructions.py's row aio-floor). Each task has its own socket to
    the first master, registered once with loop.add_reader; a cycle sends `SET name 1 NX PX ttl`,
    awaits a future the reader callback sets with the reply's bytes, then `DEL name` the same way
    (no token, no script, no parsing beyond the first reply's check)."""

    async def _open(self) -> None:
        self.sockets: list[socket.socket] = []

    def _cycle_fn(self, name: str):
        loop = self.loop
        sock = socket.create_connection((HOST, self.ports[0]))
        sock.setblocking(False)
        self.sockets.append(sock)
        key = name.encode()
        ttl = str(int(TTL_S * 1000)).encode()

        def command(*args: bytes) -> bytes:
            parts = [b"*%d\r\n" % len(args)]
            parts += [b"$%d\r\n%s\r\n" % (len(arg), arg) for arg in args]
            return b"".join(parts)

        set_nx = command(b"SET", key, b"1", b"NX", b"PX", ttl)
        delete = command(b"DEL", key)
        waiting: list[asyncio.Future] = []

        def on_readable() -> None:
            data = sock.recv(4096)
            if waiting:
                waiting.pop().set_result(data)

        loop.add_reader(sock.fileno(), on_readable)

        async def cycle():
            future = loop.create_future()
            waiting.append(future)
            sock.send(set_nx)
            if await future != b"+OK\r\n":
                raise NotAcquired(self.lib)
            future = loop.create_future()
            waiting.append(future)
            sock.send(delete)
            await future

        return cycle

    async def _close(self) -> None:
        for sock in self.sockets:
            self.loop.remove_reader(sock.fileno())
            sock.close()


# -- the hiredis venv's worker --------------------------------------------------------------------


class RemoteCycler(Cycler):
    """A cycler in the hiredis venv's worker process: run(k) sends k down a pipe and waits for
    the worker's answer, so a round includes one pipe round trip (`ipc_s`: the median of 21
    empty rounds, k=0, measured at start; with tasks it includes waking them)."""

    def __init__(self, lib: str, ports, tasks: int | None, prefix: str):
        self.lib = lib
        self.failures: list[str] = []
        if not os.access(HIREDIS_PYTHON, os.X_OK):
            raise FileNotFoundError(
                f"{HIREDIS_PYTHON} is missing: `make bench` makes bench/.venv-hiredis "
                "(redis-py and hiredis)"
            )
        spec = {"lib": REMOTE[lib], "ports": list(ports), "tasks": tasks, "prefix": prefix}
        self.proc = subprocess.Popen(
            [HIREDIS_PYTHON, os.path.abspath(__file__), json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        self.info = json.loads(self._answer())
        if not self.info.get("hiredis"):
            self.close()
            raise RuntimeError(f"{HIREDIS_PYTHON}: redis-py does not use hiredis there")
        self.info["ipc_s"] = statistics.median(self._time_round_trip() for _ in range(21))

    def _time_round_trip(self) -> float:
        t0 = time.perf_counter()
        self.run(0)
        return time.perf_counter() - t0

    def _answer(self) -> str:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker for {self.lib} exited ({self.proc.wait()})")
        if line.startswith("error "):
            raise NotAcquired(f"{self.lib} (worker): {line[6:].strip()}")
        return line

    def run(self, k: int) -> None:
        self.proc.stdin.write(f"{k}\n")
        self._answer()

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def open_tasks(lib: str, ports, tasks: int, prefix: str) -> Cycler:
    if lib in REMOTE:
        return RemoteCycler(lib, ports, tasks, prefix)
    if lib in ("aio-native", "aio-python"):
        return HiredlockTasks(lib[4:], ports, tasks, prefix)
    if lib == "aio-floor":
        return FloorTasks(lib, ports, tasks, prefix)
    factory = {"redis-py-aio": RedisPyTasks, "pottery-aio": PotteryTasks}[lib]
    return factory(lib, ports, tasks, prefix)


def serve(spec: dict) -> None:
    """The worker: makes the cycler, says which parser redis-py uses, then runs `k` per line."""
    import platform

    import redis

    try:
        if spec["lib"] == "redis-py":  # the sync Lock of libs.py
            cycler = open_cycle("redis-py", spec["ports"], spec["prefix"])
        else:
            cycler = open_tasks(spec["lib"], spec["ports"], spec["tasks"], spec["prefix"])
    except Exception as exc:
        print(f"error {exc!r}", flush=True)
        return
    info = {"hiredis": hiredis_parser(), "redis": redis.__version__}
    info["python"] = platform.python_version()
    print(json.dumps(info), flush=True)
    try:
        for line in sys.stdin:
            if line.strip() == "quit":
                break
            try:
                cycler.run(int(line))
            except Exception as exc:
                print(f"error {exc!r}", flush=True)
                return
            print("ok", flush=True)
    finally:
        cycler.close()


if __name__ == "__main__":
    serve(json.loads(sys.argv[1]))
