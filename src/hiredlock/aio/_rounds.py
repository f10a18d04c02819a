"""Rounds on the event loop, batched on one connection per master: the asyncio driver of the
algorithm's steps.

Every round a task asks for is queued, by shape (the command and its timeout and flags). The
queued rounds of one shape go out together, as one engine round (one write per master for all of
them), and each task is handed its own slice of the results. An AsyncRedlock has one engine (one
connection per master), and its batches go out one after another: while one is in flight, the
rounds asked for meanwhile wait and go together when it ends. A round asked for while nothing is
queued or in flight goes out at once. The engine's rounds are fed by the loop's reader, writer
and timer callbacks (see hiredlock.aio._driver): no thread, no task per round, and the native
engine's C code parses the replies.

One connection per master is what keeps a lock's commands in order on every master: a release
can never overtake the SET it undoes on a master that is slow or stopped and then runs what it
had buffered. (Two connections to one master are served in no promised order.)

Cancellation: a cancelled task whose round has not gone out yet is left out of its batch
(nothing was sent); once it went out, the task waits (shielded) for that batch to end before the
steps hear of the cancellation, so that their unlock can never overtake the command it undoes.
Batches are driven by the loop's callbacks, never by the caller, so a cancelled caller never cuts
a round short and never desynchronises a connection.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Optional

from .._core import batches as _batches
from .._core import scripts as _scripts
from .._core.errors import HiredlockError
from .._core.requests import (
    Cleanup,
    Pause,
    RoundRequest,
    RunScript,
    SetNx,
    Steps,
)
from .._core.session import Session, closed_error
from .._engines.drain import close_draining
from ._driver import Driver

try:
    import cython  # type: ignore[import-untyped]
except ImportError:  # uncompiled, without Cython installed: only `compiled` is read
    from types import SimpleNamespace

    cython = SimpleNamespace(compiled=False)

_ACQUIRE_FENCED_SHA = _scripts.ACQUIRE_FENCED.sha

_log = logging.getLogger("hiredlock.close")
_running_loop = asyncio.get_running_loop
_Future = asyncio.Future
_base_create_future = asyncio.BaseEventLoop.create_future


def send_step(steps: Steps, value: Any, out: list[Any]) -> bool:
    """Sends `value` into the steps: True and what they asked for next in out[0], or False and
    what they returned. Compiled, with PyIter_Send (_rounds.pxd): a step generator's end costs
    no StopIteration (Cython would add a traceback entry to it on every run)."""
    if not cython.compiled:
        try:
            out[0] = steps.send(value)
        except StopIteration as stop:
            out[0] = stop.value
            return False
        return True
    # (the names below are _rounds.pxd's C declarations)
    sent = cython.declare(cython.pointer(PyObject), cython.NULL)  # type: ignore[name-defined]  # noqa: F821
    status = PyIter_Send(steps, value, cython.address(sent))  # type: ignore[name-defined]  # noqa: F821
    out[0] = cython.cast(object, sent)
    Py_DECREF(sent)  # type: ignore[name-defined]  # noqa: F821
    return bool(status == PYGEN_NEXT)  # type: ignore[name-defined]  # noqa: F821


class _Batch:
    """The requests of one shape that go out together, as one engine round: the requests
    and their callers' futures (a cancelled caller's future is done: its request is left out)."""

    __slots__ = (
        "done",
        "engine",
        "flushed",
        "futures",
        "over",
        "requests",
        "rnd",
        "rounds",
        "slices",
    )

    def __init__(self, rounds: AsyncRounds) -> None:
        self.rounds = rounds
        self.engine: Any = None  # the engine and the round it went out as
        self.rnd: Any = None
        self.requests: list[RoundRequest] = []
        self.futures: list[asyncio.Future[Any]] = []
        # (future, start, stop): the caller's results are results[start:stop]
        self.slices: list[tuple[asyncio.Future[Any], int, Optional[int]]] = []
        self.flushed = False
        self.over = False  # the engine round is over
        # Made only for a task that waits for the end (_settle, drain): most batches have none.
        self.done: Optional[asyncio.Future[None]] = None

    def round_ended(self, exc: Optional[BaseException]) -> None:
        """The Driver's on_end for the round the batch went out as."""
        self.rounds._ended(self, exc)

    def end(self) -> None:
        self.over = True
        if self.done is not None:
            self.done.set_result(None)

    async def wait(self, loop: asyncio.AbstractEventLoop) -> None:
        """Until the engine round is over (a cancellation of the waiter does not stop it)."""
        if not self.over:
            if self.done is None:
                self.done = loop.create_future()
            await asyncio.shield(self.done)


class AsyncRounds:
    """Runs the rounds of one AsyncRedlock on the event loop it is first used in."""

    __slots__ = (
        "_closing",
        "_driver",
        "_engine",
        "_in_flight",
        "_loop",
        "_plain_futures",
        "_queued",
        "_session",
        "_tasks",
    )

    def __init__(self, session: Session) -> None:
        self._session = session
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        # The loop makes its futures as asyncio's own loops do (asyncio.Future(loop=loop)),
        # which is then called directly, not through the loop's create_future() in Python.
        self._plain_futures = False
        self._queued: dict[tuple[Any, ...], _Batch] = {}
        self._engine: Any = None  # made on first use
        self._driver: Optional[Driver] = None  # the engine's sockets on the loop
        self._in_flight: Optional[_Batch] = None
        self._tasks: set[asyncio.Task[Any]] = set()  # renewals and on_lost coroutines
        self._closing: Optional[asyncio.Future[None]] = None  # done once aclose() began

    # -- the loop ------------------------------------------------------------------------------

    def loop(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            if self._loop is not None and not self._loop.is_closed():
                raise RuntimeError("an AsyncRedlock is used from one event loop: make one per loop")
            # The first loop, or a new one after the last was closed: a round left in flight on
            # the closed loop will never end, and its connections owe replies: they go.
            self._loop = loop
            self._plain_futures = type(loop).create_future is _base_create_future
            self._driver = None  # (its registrations went with the closed loop)
            if self._in_flight is not None and self._engine is not None:
                close_draining(self._engine)
                self._engine = None
            self._in_flight = None
            self._queued = {}
            self._closing = None
        return loop

    def spawn(self, coroutine: Any) -> bool:
        """Runs a coroutine of this client's (a renewal, an on_lost callback) as a task that
        aclose() cancels; False (and the coroutine closed) when the client is closed."""
        if self._session.closed:
            coroutine.close()
            return False
        task = self.loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    # -- running steps -------------------------------------------------------------------------

    async def run(self, steps: Steps, pin: Optional[list[Any]] = None) -> Any:
        """Drives a step generator to its end on the loop; returns what it returns (see
        hiredlock._core.requests: an exception, cancellation included, is thrown into the steps at
        the request it interrupted, so that their clean-up goes out before it propagates).

        pin: taken as the blocking rounds take it, and not needed here: every round of this
        client goes out on its one connection per master, in order."""
        out: list[Any] = [None]
        more = send_step(steps, None, out)
        while more:
            request = out[0]
            try:
                if type(request) is Pause:
                    notices = request.notices
                    if notices is None:
                        await self._sleep(request.seconds)
                    elif (
                        await notices.wait(request.channel, request.seconds, request.seen)
                        and request.settle
                    ):
                        await self._sleep(request.settle)
                    reply = None
                elif type(request) is Cleanup:
                    reply = await self._uncancelled(request)
                else:
                    batch, future = self._submit(request)
                    try:
                        reply = await future
                    except asyncio.CancelledError:
                        await self._settle(batch)
                        raise
            except BaseException as exc:
                try:
                    out[0] = steps.throw(exc)
                except StopIteration as stop:
                    return stop.value
                continue
            more = send_step(steps, reply, out)
        return out[0]

    async def _sleep(self, seconds: float) -> None:
        """A pause between attempts, cut short by aclose() (see wake_all)."""
        closing = self._closing
        if closing is None:
            closing = self._closing = self.loop().create_future()
        if not closing.done():
            await asyncio.wait((closing,), timeout=seconds)

    def wake_all(self) -> None:
        """aclose(): every pause between attempts ends now."""
        closing = self._closing
        if closing is None:
            if self._loop is None or self._loop.is_closed():
                return
            closing = self._closing = self._loop.create_future()
        if not closing.done():
            closing.set_result(None)

    def _submit(self, request: RoundRequest) -> tuple[_Batch, asyncio.Future[Any]]:
        loop = _running_loop()
        if loop is not self._loop:
            loop = self.loop()
        session = self._session
        if session.rounds_closed:
            raise closed_error()
        if session.closed and (type(request) is SetNx or request.sha == _ACQUIRE_FENCED_SHA):
            raise closed_error()  # (after aclose() began: only unlocks)
        future = _Future(loop=loop) if self._plain_futures else loop.create_future()
        if self._in_flight is None and not self._queued:
            # Nothing in flight (so nothing queued: a batch's end sends the next): this round
            # goes out now, alone. The rounds asked for while it is in flight go together when
            # it ends.
            batch = _Batch(self)
            batch.flushed = True
            batch.slices.append((future, 0, None))
            self._send(batch, request)
            return batch, future
        if type(request) is SetNx:
            shape: tuple[Any, ...] = (SetNx, request.ttl_ms, request.timeout_ms)
        else:
            # everything but the argvs (a clean-up goes out as the script it runs), never equal
            # to a SetNx shape: it starts with the script's sha
            shape = request[:3] + request[4:]
        queued = self._queued.get(shape)
        if queued is None:
            queued = self._queued[shape] = _Batch(self)
        queued.requests.append(request)
        queued.futures.append(future)
        if self._in_flight is None:
            self._flush()  # (never expected: nothing stays queued while nothing is in flight)
        return queued, future

    async def _uncancelled(self, request: Cleanup) -> Any:
        """A clean-up round (a script): a second cancellation does not stop it (it is bounded by
        the per-master timeout); the first one is what propagates afterwards."""
        _batch, future = self._submit(RunScript(*request))
        while True:
            try:
                return await asyncio.shield(future)
            except asyncio.CancelledError:
                if future.done():
                    return future.result()

    async def _settle(self, batch: _Batch) -> None:
        """After a cancellation: a round that has not gone out never will (the flush leaves out
        requests whose future is done); otherwise waits until the batch it went out in is over."""
        if not batch.flushed:
            return
        while not batch.over:
            try:
                await batch.wait(self.loop())
            except asyncio.CancelledError:
                continue

    # -- batches -------------------------------------------------------------------------------

    def _flush(self) -> None:
        """Sends the oldest queued batch, unless one is in flight (its end sends the next)."""
        while self._queued and self._in_flight is None:
            shape = next(iter(self._queued))
            batch = self._queued.pop(shape)
            batch.flushed = True
            request = _merged(batch)
            if request is None:  # every caller was cancelled before it went out
                batch.end()
                continue
            self._send(batch, request)

    def _send(self, batch: _Batch, request: RoundRequest) -> None:
        """One engine round for the batch, begun here (its commands are written now) and fed
        by the loop's callbacks."""
        self._in_flight = batch
        try:
            stale = self._session.engine_stale
            if self._engine is not None and stale is not None and stale(self._engine):
                self._close_engine()  # (a cluster's links changed: routing.py)
            engine = self._engine
            if engine is None:
                engine = self._engine = self._session.new_engine()
            driver = self._driver
            if driver is None:
                loop = self._loop
                assert loop is not None  # (the batch was asked for from this loop)
                driver = self._driver = Driver(loop, engine)
            batch.engine = engine
            batch.rnd = engine.begin(request)
            driver.start(batch.rnd, batch.round_ended)
        except Exception as exc:
            self._ended(batch, exc)

    def _ended(self, batch: _Batch, exc: Optional[BaseException]) -> None:
        """A batch's round is over: each caller gets its slice of the results (or the error),
        and the next batch goes out."""
        try:
            if exc is None:
                results = batch.engine.finish(batch.rnd)
        except Exception as error:
            exc = error
        for future, start, stop in batch.slices:
            if future.done():
                continue  # its task was cancelled meanwhile
            if exc is None:
                future.set_result(results if stop is None else results[start:stop])
            else:
                future.set_exception(
                    exc if isinstance(exc, Exception) else HiredlockError(repr(exc))
                )
        self._in_flight = None
        batch.end()
        if self._queued and not self._session.rounds_closed:
            self._flush()

    # -- closing -------------------------------------------------------------------------------

    async def drain(self) -> None:
        """Waits for every batch queued or in flight to end (each within its timeouts)."""
        # (nothing stays queued while nothing is in flight: a batch's end sends the next)
        while self._in_flight is not None:
            await self._in_flight.wait(self.loop())

    async def stop_tasks(self) -> None:
        tasks = [task for task in self._tasks if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def flush(self) -> None:
        """Before the connections close: when commands of ended rounds are still unwritten or
        unanswered (a slow or stopped master), one more round (a script that does nothing,
        bounded by the master timeout) writes them and reads what comes back, so that an unlock
        left behind a master's full socket still reaches it if it answers in that time."""
        engine = self._engine
        if engine is None or self._session.rounds_closed or not engine.owes_replies():
            return
        try:
            await self.run(_batches.connect_steps(self._session))
        except HiredlockError as exc:
            _log.debug("hiredlock: the last round before closing failed: %s", exc)

    def close(self) -> None:
        """Closes the connections (after drain(): no batch is in flight any more, and the
        session's rounds_closed is set: no round goes out from here on)."""
        self._close_engine()

    def _close_engine(self) -> None:
        """Closes the engine, its sockets off the loop first (see aio/_driver.py: closes)."""
        engine, self._engine = self._engine, None
        driver, self._driver = self._driver, None
        if driver is not None:
            driver.clear()
        if engine is not None:
            close_draining(engine)


def _merged(batch: _Batch) -> Optional[RoundRequest]:
    """One engine round for the batch's live requests (None: there are none); batch.slices says
    where each caller's results will be."""
    slices = batch.slices
    live = [
        (future, request)
        for future, request in zip(batch.futures, batch.requests)
        if not future.done()
    ]
    if not live:
        return None
    if len(live) == 1:
        future, request = live[0]
        slices.append((future, 0, None))
        return request
    position = 0
    first = live[0][1]
    if type(first) is SetNx:
        keys: list[bytes] = []
        tokens: list[bytes] = []
        for future, request in live:
            count = len(request.keys)  # type: ignore[union-attr]
            slices.append((future, position, position + count))
            position += count
            keys.extend(request.keys)  # type: ignore[union-attr]
            tokens.extend(request.tokens)  # type: ignore[union-attr]
        return first._replace(keys=keys, tokens=tokens)
    argvs: list[tuple[bytes, ...]] = []
    for future, request in live:
        count = len(request.argvs)  # type: ignore[union-attr]
        slices.append((future, position, position + count))
        position += count
        argvs.extend(request.argvs)  # type: ignore[union-attr]
    return first._replace(argvs=argvs)
