"""One set of API tests for both APIs: the sync one (hiredlock.Redlock) and asyncio's
(hiredlock.aio.AsyncRedlock), through a facade that gives an AsyncRedlock the sync API's shape.

A test module opts in with

    from apis import make_redlock_fixture, pytest_generate_tests  # noqa: F401  (both APIs)

Every test of the module that uses `make_redlock` (or the `api` argument, or `canary_redlock`
when `canary_redlock_fixture` is imported too) then runs on api "sync" and "async", on both
engines. `@sync_only("why")` keeps a test on the sync API (fork, threads).  A module where only a
few tests apply imports `api_fixture` instead of pytest_generate_tests and marks them @both_apis.

The facade (AsyncApi):
* one event loop per test, in its own thread; each thread calling the facade is served by ONE
  long-lived task of that loop, which runs its calls in order: an AsyncRLock owned by a task then
  behaves as an RLock owned by a thread (another thread = another task);
* every call that does something (building the client and its locks, acquire, release, extend,
  `with` = `async with`, batches, inspect, locked, close = aclose) runs in the caller's task and
  its result or exception (the very instance, of the same hiredlock type) comes back unchanged;
  properties are read as they are (`lost` is the lock's asyncio.Event, with a blocking wait());
* `synchronized(...)(f)` wraps f in an `async def` for AsyncRedlock.synchronized: f's body runs
  inside the caller's task, holding the lock, as a coroutine's body would.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
import time
from typing import Any, Callable

import pytest

APIS = ["sync", "async"]

# How long a facade call may take before the test fails instead of hanging (the loop is stuck).
CALL_TIMEOUT = 120.0


def pytest_generate_tests(metafunc):
    """Parametrises `api` (asked for directly or through make_redlock/canary_redlock)."""
    if "api" not in metafunc.fixturenames:
        return
    apis = ["sync"] if getattr(metafunc.function, "sync_only", None) else APIS
    metafunc.parametrize("api", apis, ids=apis, scope="function")


# For a module where only some tests run on both APIs: import `api_fixture` (api "sync" unless
# parametrised) with make_redlock_fixture, and decorate those tests with @both_apis.
both_apis = pytest.mark.parametrize("api", APIS, ids=APIS)


@pytest.fixture(name="api")
def api_fixture() -> str:
    """The sync API, for the tests of a module that are not decorated with @both_apis."""
    return "sync"


def sync_only(reason: str) -> Callable[[Callable], Callable]:
    """Keeps a test on the sync API only (fork, the watchdog thread, ...): `reason` says why."""

    def mark(test: Callable) -> Callable:
        test.sync_only = reason  # type: ignore[attr-defined]
        return test

    return mark


def timed(method: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float, float]:
    """(result, t0, t1): method(*args, **kwargs) with time.monotonic() read right before and after
    it, where it runs: in the caller's task on the async API, so that the facade's hand-off
    between threads (before the library's clock starts) is not counted as the library's."""
    in_task = getattr(method, "timed", None)
    if in_task is not None:
        return in_task(*args, **kwargs)
    t0 = time.monotonic()
    result = method(*args, **kwargs)
    return result, t0, time.monotonic()


# -- the event loop and the callers' tasks ---------------------------------------------------------


class LoopThread:
    """An event loop running in its own thread; call(make) runs `await make()` in the task that
    serves the calling thread and returns its result (or raises its exception)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.thread = threading.Thread(target=self._run, name="tests-aio-loop", daemon=True)
        self._local = threading.local()
        self._queues: list[asyncio.Queue] = []
        self._workers: list[asyncio.Task] = []
        self.facades: dict[int, tuple[Any, Any]] = {}  # id(object): (object, its facade)
        self.thread.start()
        self._ready.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        self.loop.run_forever()

    async def _new_worker(self) -> asyncio.Queue:
        queue: asyncio.Queue = asyncio.Queue()
        self._queues.append(queue)
        self._workers.append(asyncio.get_running_loop().create_task(self._serve(queue)))
        return queue

    @staticmethod
    async def _serve(queue: asyncio.Queue) -> None:
        while True:
            item = await queue.get()
            if item is None:
                return
            make, done = item
            try:
                result = await make()
            except BaseException as exc:  # KeyboardInterrupt, CancelledError: the caller's
                done.set_exception(exc)
            else:
                done.set_result(result)

    def call(self, make: Callable[[], Any]) -> Any:
        if threading.current_thread() is self.thread:
            raise RuntimeError("a facade call from the event loop's own thread would deadlock")
        queue = getattr(self._local, "queue", None)
        if queue is None:
            queue = asyncio.run_coroutine_threadsafe(self._new_worker(), self.loop).result(
                CALL_TIMEOUT
            )
            self._local.queue = queue
        done: concurrent.futures.Future = concurrent.futures.Future()
        self.loop.call_soon_threadsafe(queue.put_nowait, (make, done))
        return done.result(CALL_TIMEOUT)

    def run(self, fn: Callable[[], Any]) -> Any:
        """Runs a plain function inside the caller's task (where a coroutine would call it)."""

        async def inside() -> Any:
            return fn()

        return self.call(inside)

    def close(self) -> None:
        async def stop() -> None:
            for queue in self._queues:
                queue.put_nowait(None)
            await asyncio.gather(*self._workers)

        asyncio.run_coroutine_threadsafe(stop(), self.loop).result(CALL_TIMEOUT)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(CALL_TIMEOUT)
        self.loop.close()


# -- the facade ------------------------------------------------------------------------------------


def _unwrap(obj: Any) -> Any:
    return obj._target if isinstance(obj, _Facade) else obj


class _Facade:
    """Reads go to the target; its coroutine methods run in the caller's task."""

    __slots__ = ("_runner", "_target")

    def __init__(self, runner: LoopThread, target: Any) -> None:
        object.__setattr__(self, "_runner", runner)
        object.__setattr__(self, "_target", target)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._target, name)
        if callable(value) and asyncio.iscoroutinefunction(value):
            runner = self._runner

            @functools.wraps(value)
            def in_task(*args: Any, **kwargs: Any) -> Any:
                return _wrap(runner, runner.call(lambda: value(*args, **kwargs)))

            def timed_in_task(*args: Any, **kwargs: Any) -> tuple[Any, float, float]:
                async def timed_call() -> tuple[Any, float, float]:
                    t0 = time.monotonic()
                    result = await value(*args, **kwargs)
                    return _wrap(runner, result), t0, time.monotonic()

                return runner.call(timed_call)

            in_task.timed = timed_in_task  # type: ignore[attr-defined]
            return in_task
        return _wrap(self._runner, value)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target, name, value)

    def __repr__(self) -> str:
        return repr(self._target)


class LockFacade(_Facade):
    """AsyncLock / AsyncRLock / AsyncSemaphore (and AsyncPermit, an AsyncLock) as Lock / RLock /
    Semaphore: `with` runs `async with` in the caller's task."""

    __slots__ = ()

    def __enter__(self) -> Any:
        return _wrap(self._runner, self._runner.call(self._target.__aenter__))

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Any:
        return self._runner.call(lambda: self._target.__aexit__(exc_type, exc, tb))


class EventFacade(_Facade):
    """An asyncio.Event (lock.lost) as a threading.Event: is_set() and a blocking wait()."""

    __slots__ = ()

    def is_set(self) -> bool:
        return self._target.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        event = self._target

        async def waiting() -> bool:
            try:
                await asyncio.wait_for(event.wait(), timeout)
            except asyncio.TimeoutError:
                return False
            return True

        return self._runner.call(waiting)


class AsyncApi(_Facade):
    """An AsyncRedlock with Redlock's shape (see the module's docstring)."""

    __slots__ = ()

    def __init__(self, runner: LoopThread, *args: Any, **kwargs: Any) -> None:
        from hiredlock.aio import AsyncRedlock

        super().__init__(runner, runner.run(lambda: AsyncRedlock(*args, **kwargs)))

    def lock(self, *args: Any, **kwargs: Any) -> LockFacade:
        return _wrap(self._runner, self._runner.run(lambda: self._target.lock(*args, **kwargs)))

    def multilock(self, *args: Any, **kwargs: Any) -> LockFacade:
        make = self._target.multilock
        return _wrap(self._runner, self._runner.run(lambda: make(*args, **kwargs)))

    def rlock(self, *args: Any, **kwargs: Any) -> LockFacade:
        return _wrap(self._runner, self._runner.run(lambda: self._target.rlock(*args, **kwargs)))

    def semaphore(self, *args: Any, **kwargs: Any) -> LockFacade:
        """An AsyncSemaphore as a Semaphore: acquire() runs in the caller's task and gives the
        AsyncPermit's facade (or None); `with` is `async with`, in the caller's task."""
        make = self._target.semaphore
        return _wrap(self._runner, self._runner.run(lambda: make(*args, **kwargs)))

    def acquire_many(self, names: Any, ttl: Any) -> list:
        return _wrap(self._runner, self._runner.call(lambda: self._target.acquire_many(names, ttl)))

    def release_many(self, locks: Any) -> None:
        def release() -> Any:
            return self._target.release_many(_unwrap(lock) for lock in locks)

        return self._runner.call(release)

    def synchronized(self, *args: Any, **kwargs: Any) -> Callable[[Callable], Callable]:
        runner = self._runner
        decorate = runner.run(lambda: self._target.synchronized(*args, **kwargs))

        def sync_decorate(func: Callable) -> Callable:
            @functools.wraps(func)
            async def as_coroutine(*a: Any, **kw: Any) -> Any:
                return func(*a, **kw)

            locked = runner.run(lambda: decorate(as_coroutine))

            @functools.wraps(locked)
            def call(*a: Any, **kw: Any) -> Any:
                return runner.call(lambda: locked(*a, **kw))

            return call

        return sync_decorate

    def close(self) -> None:
        self._runner.call(self._target.aclose)

    def __enter__(self) -> AsyncApi:
        self._runner.call(self._target.__aenter__)
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._runner.call(lambda: self._target.__aexit__(*exc_info))


def _wrap(runner: LoopThread, value: Any) -> Any:
    """The facade of an asyncio object the API returned; anything else unchanged. A given object
    always gets the same facade (`rlock.lock is inner` holds as it does on the sync API)."""
    from hiredlock.aio import AsyncLock, AsyncRedlock, AsyncRLock, AsyncSemaphore

    if isinstance(value, list):
        return [_wrap(runner, v) for v in value]
    if isinstance(value, (AsyncLock, AsyncRLock, AsyncSemaphore)):
        kind: type = LockFacade
    elif isinstance(value, asyncio.Event):
        kind = EventFacade
    elif isinstance(value, AsyncRedlock):
        kind = _Facade
    else:
        return value
    known = runner.facades.get(id(value))
    if known is None or known[0] is not value:
        known = runner.facades[id(value)] = (value, kind(runner, value))
    return known[1]


class RWFacade:
    """An AsyncRWLock as an RWLock: read() and write() are made in the caller's task and come
    back as a LockFacade of the AsyncReadLock / AsyncWriteLock."""

    def __init__(self, runner: Any, target: Any) -> None:
        self._runner = runner
        self._target = target

    @property
    def name(self) -> Any:
        return self._target.name

    def read(self) -> Any:
        return _wrap(self._runner, self._runner.run(self._target.read))

    def write(self) -> Any:
        return _wrap(self._runner, self._runner.run(self._target.write))


def rwlock(rl: Any, name: Any, ttl: Any, **options: Any) -> Any:
    """rl.rwlock(name, ttl, **options) on either API (rl: a Redlock or apis.AsyncApi)."""
    runner = getattr(rl, "_runner", None)
    if runner is None:
        return rl.rwlock(name, ttl, **options)
    target = runner.run(lambda: rl._target.rwlock(name, ttl, **options))
    return RWFacade(runner, target)


def fence_worker(api: str, engine: str, *args: Any) -> None:
    """features_support.fence_worker (run in a spawned process) on either API: on "async" the
    worker's hiredlock.Redlock is the facade of an AsyncRedlock (in that process only)."""
    from features_support import fence_worker as worker

    import hiredlock

    if api == "sync":
        worker(engine, *args)
        return
    runner = LoopThread()
    hiredlock.Redlock = functools.partial(AsyncApi, runner)  # type: ignore[misc]
    try:
        worker(engine, *args)
    finally:
        runner.close()


# -- fixtures --------------------------------------------------------------------------------------


class Clients:
    """Builds a Redlock (api "sync") or an AsyncApi (api "async"); closes them all at the end."""

    def __init__(self, api: str, engine: str) -> None:
        self.api = api
        self.engine = engine
        self.made: list[Any] = []
        # The loop thread starts now, with the fixture: a test's thread baseline (LeakCheck)
        # taken afterwards includes it.
        self.runner = LoopThread() if api == "async" else None

    def __call__(self, masters: Any, **kwargs: Any) -> Any:
        from hiredlock import Redlock

        kwargs.setdefault("backend", self.engine)
        if self.api == "sync":
            client = Redlock(masters, **kwargs)
        else:
            client = AsyncApi(self.runner, masters, **kwargs)
        self.made.append(client)
        return client

    def close(self) -> None:
        made, self.made = self.made, []
        try:
            for client in made:
                client.close()
        finally:
            runner, self.runner = self.runner, None
            if runner is not None:
                runner.close()


@pytest.fixture(name="make_redlock")
def make_redlock_fixture(api, engine):
    """conftest's make_redlock on both APIs: Redlock(...) or the AsyncRedlock facade."""
    clients = Clients(api, engine)
    yield clients
    clients.close()


@pytest.fixture(name="canary_redlock")
def canary_redlock_fixture(make_redlock, canary):
    """conftest's canary_redlock on both APIs: nothing may have connected to the canary."""
    yield make_redlock([canary.url])
    make_redlock.close()
    assert not canary.touched(), "the library connected to a master while refusing bad input"
