"""The blocking driver of the algorithm's steps (see hiredlock._core.requests for what they ask).

`run` drives a step generator to its end on engines from a pool, waiting in the engines' own poll
loops (in C where the native extension loads: _native/steps.pxi's run_steps); `run_one` runs one
of their requests (the direct form of a lock's steps calls it: see
hiredlock/_sync/blocking_steps.py). Compiled (blocking.pxd), run_one calls the pool's checkout and
checkin and a native engine's methods in C.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Optional

from .._core.requests import Cleanup, Pause, Request, RunScript, SetNx, Steps

if TYPE_CHECKING:
    from .pool import EnginePool

_NATIVE_ENGINE: Optional[type] = None
try:  # (the type a native engine has; compiled, its methods are called in C: see blocking.pxd)
    from .._native import NativeEngine

    _NATIVE_ENGINE = NativeEngine
except ImportError:
    pass


def pause(request: Pause) -> None:
    """Waits as a Pause request asks, blocking."""
    if request.notices is None:
        request.closing.wait(request.seconds)
    elif request.notices.wait(request.channel, request.seconds, request.seen) and request.settle:
        request.closing.wait(request.settle)


def run_one(pool: EnginePool, request: Request, pin: Optional[list[Any]] = None) -> Any:
    """Runs one request, blocking, on an engine from `pool` (one engine per round: it goes back
    to the pool as the round ends), or waits as a Pause asks; returns its reply.

    pin: a lock's one-item list. After a round that left commands behind on a master (see the
    engine contract's owes_replies), it holds that engine, and the lock's next rounds go out on
    it, behind them; otherwise None.
    """
    if type(request) is Pause:
        pause(request)
        return None
    prefer = None if pin is None else pin[0]
    # (the wait for the preferred engine: about a round, this one's timeout)
    engine = pool.checkout() if prefer is None else pool.checkout(prefer, request.timeout_ms)
    native: Any = engine if type(engine) is _NATIVE_ENGINE else None
    try:
        if native is not None:
            return native.run(request)
        return engine.run(request)
    finally:
        if pin is not None:
            owes = native.owes_replies() if native is not None else engine.owes_replies()
            pin[0] = engine if owes else None
        pool.checkin(engine)


def run_python(pool: EnginePool, steps: Steps, pin: Optional[list[Any]] = None) -> Any:
    """Drives a step generator to its end, blocking, one request at a time (see run_one, pin
    included); returns what the generator returns.

    An exception raised while a request runs (an interrupt, an engine error) is thrown into the
    generator at the point that asked for it, so that it can clean up (send the unlock) with
    further requests before the exception propagates.
    """
    send = steps.send
    try:
        request = send(None)
        while True:
            try:
                reply = run_one(pool, request, pin)
            except BaseException as exc:
                request = steps.throw(exc)
                continue
            request = send(reply)
    except StopIteration as stop:
        return stop.value


try:  # the same loop in C where the native extension loads (see _native/steps.pxi)
    from .. import _native
except ImportError:
    run = run_python
else:
    _native.set_request_types(SetNx, RunScript, Cleanup, Pause, pause)
    run = _native.run_steps


class BlockingRounds:
    """The rounds of one blocking client: run(steps, pin=None) drives steps on its engine pool
    (the C loop where the native extension loads), as hiredlock.aio's AsyncRounds does on the
    loop, and returns what they return (see run_python); the direct form of a lock's steps runs
    its requests with run_one on `pool`."""

    __slots__ = ("pool", "run")

    def __init__(self, pool: EnginePool) -> None:
        self.pool = pool
        self.run: Any = functools.partial(run, pool)

    def close(self) -> None:
        """Closes the idle connections; the ones in use close as their rounds end."""
        self.pool.close()
