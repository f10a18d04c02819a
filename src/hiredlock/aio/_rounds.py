"""Rounds on the event loop, batched: the asyncio driver of the algorithm's steps.

Every round a task asks for is queued; at the end of the loop iteration (one call_soon) the rounds
queued meanwhile go out together, one engine round per kind of command (so one write per master
for all of them), and each task is handed its own slice of the results. The engines' rounds are
fed by the loop (see hiredlock._aio_driver): no thread, and the native engine's C code parses the
replies. An engine is used by one batch at a time; the few that batches in flight at once need
are kept for reuse. No task is made per round: the rounds are begun in the flush and fed by the
loop's reader, writer and timer callbacks, which hand each caller its results.

Cancellation: a cancelled task whose round has not gone out yet withdraws it (nothing was sent);
once it went out, the task waits (shielded) for that batch to end before the steps hear of the
cancellation, so that their unlock can never overtake the command it undoes. Batches are driven by
the loop's callbacks, never by the caller, so a cancelled caller never cuts a round short and
never desynchronises a connection.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import Any, Optional

from .. import _scripts
from .._aio_driver import start
from .._errors import HiredlockError
from .._session import Session
from .._steps import CLEANUP, PAUSE, SCRIPT, SET_NX, Steps, begin_on_engine

MAX_IDLE_ENGINES = 4
_ACQUIRE_FENCED_SHA = _scripts.ACQUIRE_FENCED.sha

_log = logging.getLogger("hiredlock")
_running_loop = asyncio.get_running_loop


class _Batch:
    """The requests of one shape that go out together, as one engine round: their arguments
    and their callers' futures (a cancelled caller's future is done: its request is left out)."""

    __slots__ = ("args", "done", "flushed", "futures", "kind", "slices")

    def __init__(self, loop: asyncio.AbstractEventLoop, kind: int) -> None:
        self.kind = kind
        self.args: list[tuple] = []
        self.futures: list[asyncio.Future] = []
        self.slices: list[tuple[asyncio.Future, int, int]] = []  # (future, first, count)
        self.flushed = False
        self.done = loop.create_future()  # set when the engine round is over


class AsyncRounds:
    """Runs the rounds of one AsyncRedlock on the event loop it is first used in."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._queued: dict[tuple, _Batch] = {}
        self._flush_scheduled = False
        self._idle: list[Any] = []
        self._busy: dict[int, Any] = {}  # id(engine) -> engine, for engines in a batch
        self._in_flight: set[_Batch] = set()
        self._tasks: set[asyncio.Task] = set()  # renewals and on_lost coroutines
        self._closed = False

    # -- the loop ------------------------------------------------------------------------------

    def loop(self) -> asyncio.AbstractEventLoop:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            if self._loop is not None and not self._loop.is_closed():
                raise RuntimeError("an AsyncRedlock is used from one event loop: make one per loop")
            # The first loop, or a new one after the last was closed: rounds left in flight on
            # the closed loop will never end, and their connections owe replies: they go.
            self._loop = loop
            busy, self._busy = self._busy, {}
            for engine in busy.values():
                engine.close()
            self._in_flight = set()
            self._queued = {}
            self._flush_scheduled = False
        return loop

    def spawn(self, coroutine: Any) -> bool:
        """Runs a coroutine of this client's (a renewal, an on_lost callback) as a task that
        aclose() cancels; False (and the coroutine closed) when the client is closed."""
        if self._closed or self._session.closed:
            coroutine.close()
            return False
        task = self.loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return True

    # -- running steps -------------------------------------------------------------------------

    async def run(self, steps: Steps) -> Any:
        """Drives a step generator to its end on the loop; returns what it returns (see
        hiredlock._steps: an exception, cancellation included, is thrown into the steps at the
        request it interrupted, so that their clean-up goes out before it propagates)."""
        send = steps.send
        try:
            kind, args = send(None)
            while True:
                try:
                    if kind == PAUSE:
                        await asyncio.sleep(args)
                        reply = None
                    elif kind == CLEANUP:
                        reply = await self._uncancelled(args)
                    else:
                        batch, future = self._submit(kind, args)
                        try:
                            reply = await future
                        except asyncio.CancelledError:
                            await self._settle(batch)
                            raise
                except BaseException as exc:
                    kind, args = steps.throw(exc)
                    continue
                kind, args = send(reply)
        except StopIteration as stop:
            return stop.value

    def _submit(self, kind: int, args: tuple) -> tuple[_Batch, asyncio.Future]:
        loop = _running_loop()
        if loop is not self._loop:
            loop = self.loop()
        if self._closed:
            raise HiredlockError("this Redlock is closed")
        if kind == SET_NX:
            if self._session.closed:
                raise HiredlockError("this Redlock is closed")  # after aclose() only unlocks
            shape: tuple = (SET_NX, args[2], args[3])  # ttl, timeout
        else:
            if self._session.closed and args[0] == _ACQUIRE_FENCED_SHA:
                raise HiredlockError("this Redlock is closed")
            # sha, numkeys, timeout, wait_all, want_values, honour_backoff
            shape = (SCRIPT, args[0], args[2], args[4], args[5], args[6], args[7])
        batch = self._queued.get(shape)
        future = loop.create_future()
        if batch is None:
            batch = self._queued[shape] = _Batch(loop, kind)
            batch.args.append(args)
            batch.futures.append(future)
            if not self._in_flight and len(self._queued) == 1:
                # Nothing else is going on: this round goes out now. The rounds that follow it
                # in this loop iteration wait for the end of the iteration, and go together.
                self._flush()
            elif not self._flush_scheduled:
                self._flush_scheduled = True
                loop.call_soon(self._flush)
            return batch, future
        batch.args.append(args)
        batch.futures.append(future)
        return batch, future

    async def _uncancelled(self, args: tuple) -> Any:
        """A clean-up round (a script): a second cancellation does not stop it (it is bounded by
        the per-master timeout); the first one is what propagates afterwards."""
        _batch, future = self._submit(CLEANUP, args)
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
        done = batch.done
        while not done.done():
            try:
                await asyncio.shield(done)
            except asyncio.CancelledError:
                continue

    # -- batches -------------------------------------------------------------------------------

    def _flush(self) -> None:
        """Sends the rounds queued in this loop iteration: one engine round per shape, begun
        here (its commands are written now) and fed by the loop's callbacks."""
        self._flush_scheduled = False
        queued, self._queued = self._queued, {}
        for batch in queued.values():
            batch.flushed = True
            args = _merged(batch)
            if args is None:  # every caller was cancelled before it went out
                batch.done.set_result(None)
                continue
            self._in_flight.add(batch)
            engine = self._idle.pop() if self._idle else self._session.new_engine()
            self._busy[id(engine)] = engine
            try:
                rnd = begin_on_engine(engine, batch.kind, args)
                start(rnd, self._loop, functools.partial(self._ended, batch, engine, rnd))
            except Exception as exc:
                self._ended(batch, engine, None, exc)

    def _ended(self, batch: _Batch, engine: Any, rnd: Any, exc: Optional[BaseException]) -> None:
        """A batch's round is over: each caller gets its slice of the results (or the error)."""
        try:
            if exc is None:
                results = engine.finish(rnd)
        except Exception as error:
            exc = error
        for future, first, count in batch.slices:
            if future.done():
                continue  # its task was cancelled meanwhile
            if exc is None:
                future.set_result(results[first : first + count])
            else:
                future.set_exception(
                    exc if isinstance(exc, Exception) else HiredlockError(repr(exc))
                )
        self._put_back(engine)
        self._in_flight.discard(batch)
        batch.done.set_result(None)

    def _put_back(self, engine: Any) -> None:
        self._busy.pop(id(engine), None)
        if self._closed or len(self._idle) >= MAX_IDLE_ENGINES:
            engine.close()
        else:
            self._idle.append(engine)

    # -- closing -------------------------------------------------------------------------------

    async def drain(self) -> None:
        """Waits for every batch queued or in flight to end (each within its timeouts)."""
        while self._queued or self._in_flight:
            if self._queued:
                await asyncio.sleep(0)  # the flush runs
            if self._in_flight:
                await asyncio.gather(*[batch.done for batch in self._in_flight])

    async def stop_tasks(self) -> None:
        tasks = [task for task in self._tasks if task is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def close(self) -> None:
        """Closes every engine (after drain(): none is in a batch any more)."""
        self._closed = True
        engines = self._idle + list(self._busy.values())
        self._idle = []
        self._busy = {}
        for engine in engines:
            engine.close()


def _merged(batch: _Batch) -> Optional[tuple]:
    """The arguments of one engine round for the batch's live requests (None: there are none);
    batch.slices says where each caller's results will be."""
    slices = batch.slices
    live = [(future, args) for future, args in zip(batch.futures, batch.args) if not future.done()]
    if not live:
        return None
    if len(live) == 1:
        future, args = live[0]
        slices.append((future, 0, len(args[0] if batch.kind == SET_NX else args[3])))
        return args
    position = 0
    first = live[0][1]
    if batch.kind == SET_NX:
        keys: list[bytes] = []
        tokens: list[bytes] = []
        for future, args in live:
            count = len(args[0])
            slices.append((future, position, count))
            position += count
            keys.extend(args[0])
            tokens.extend(args[1])
        return (keys, tokens, first[2], first[3])
    argvs: list[tuple[bytes, ...]] = []
    for future, args in live:
        count = len(args[3])
        slices.append((future, position, count))
        position += count
        argvs.extend(args[3])
    return (first[0], first[1], first[2], argvs, *first[4:])
