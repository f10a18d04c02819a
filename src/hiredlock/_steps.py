"""What the algorithm asks its driver for, and the blocking driver.

The algorithm (the lock kinds' step generators in _lockbase.py and _batches.py) is written once,
as generators that never do I/O and never wait: each yields a request (a round to run on every
master, or a pause) and is sent the round's results, or thrown the exception that interrupted it
(Ctrl-C, a cancelled task), so that what follows an interruption (the unlock) is written once
too. A driver runs the requests: `run()` below blocks (the engines' own poll loops, time.sleep);
hiredlock.aio awaits them on the event loop.

A request marked `cleanup` is made after an interruption: an asyncio driver shields it from a
second cancellation, and the blocking one simply runs it.
"""

from __future__ import annotations

import time
from collections.abc import Generator, Sequence
from typing import Any, Union

from ._contract import RoundResult
from ._scripts import Script


class SetNx:
    """SET key token NX PX ttl_ms, for each (key, token), on every master."""

    __slots__ = ("keys", "timeout_ms", "tokens", "ttl_ms")
    cleanup = False

    def __init__(
        self, keys: Sequence[bytes], tokens: Sequence[bytes], ttl_ms: int, timeout_ms: float
    ) -> None:
        self.keys = keys
        self.tokens = tokens
        self.ttl_ms = ttl_ms
        self.timeout_ms = timeout_ms


class RunScript:
    """A Lua script for each argv on every master (see the engine contract for the flags)."""

    __slots__ = (
        "argvs",
        "cleanup",
        "honour_backoff",
        "numkeys",
        "script",
        "timeout_ms",
        "wait_all",
        "want_values",
    )

    def __init__(
        self,
        script: Script,
        numkeys: int,
        argvs: Sequence[tuple[bytes, ...]],
        timeout_ms: float,
        wait_all: bool,
        want_values: bool = False,
        honour_backoff: bool = False,
        cleanup: bool = False,
    ) -> None:
        self.script = script
        self.numkeys = numkeys
        self.argvs = argvs
        self.timeout_ms = timeout_ms
        self.wait_all = wait_all
        self.want_values = want_values
        self.honour_backoff = honour_backoff
        self.cleanup = cleanup


class Pause:
    """Wait this many seconds (between two attempts to acquire)."""

    __slots__ = ("seconds",)
    cleanup = False

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds


Request = Union[SetNx, RunScript, Pause]
Steps = Generator[Request, Any, Any]


def run_on_engine(engine: Any, request: Union[SetNx, RunScript]) -> list[RoundResult]:
    """One round on an engine, blocking until it is over."""
    if request.__class__ is SetNx:
        return engine.set_nx(request.keys, request.tokens, request.ttl_ms, request.timeout_ms)
    script = request.script
    return engine.run_script(
        script.sha,
        script.source,
        request.numkeys,
        request.argvs,
        request.timeout_ms,
        request.wait_all,
        request.want_values,
        request.honour_backoff,
    )


def begin_on_engine(engine: Any, request: Union[SetNx, RunScript]) -> Any:
    """The same round begun on an engine, to be fed events by a driver (engine.finish gives
    its results)."""
    if request.__class__ is SetNx:
        return engine.begin_set_nx(request.keys, request.tokens, request.ttl_ms, request.timeout_ms)
    script = request.script
    return engine.begin_script(
        script.sha,
        script.source,
        request.numkeys,
        request.argvs,
        request.timeout_ms,
        request.wait_all,
        request.want_values,
        request.honour_backoff,
    )


class BlockingRounds:
    """Runs rounds on engines from a pool, one engine per call, blocking the calling thread."""

    __slots__ = ("_pool",)

    def __init__(self, pool: Any) -> None:
        self._pool = pool

    def run(self, request: Request) -> Any:
        if request.__class__ is Pause:
            time.sleep(request.seconds)
            return None
        pool = self._pool
        engine = pool.checkout()
        try:
            return run_on_engine(engine, request)
        finally:
            pool.checkin(engine)


def run(steps: Steps, rounds: BlockingRounds) -> Any:
    """Drives a step generator to its end, blocking; returns what it returns.

    An exception raised while a request runs (an interrupt, an engine error) is thrown into the
    generator at the point that asked for it, so that it can clean up (send the unlock) with
    further requests before the exception propagates.
    """
    send = steps.send
    execute = rounds.run
    try:
        request = send(None)
        while True:
            try:
                reply = execute(request)
            except BaseException as exc:
                request = steps.throw(exc)
                continue
            request = send(reply)
    except StopIteration as stop:
        return stop.value
