"""The blocking driver of the algorithm's steps (see hiredlock._core.requests for what they ask).

`run` drives a step generator to its end on engines from a pool, waiting in the engines' own poll
loops; `run_one` runs one of their requests (the direct form of a lock's steps calls it: see
hiredlock/_sync/blocking_steps.py). Where the native extension loads, both run in C
(_native/steps.pxi).
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

from .._core.requests import Cleanup, Pause, Request, RunScript, SetNx, Steps


def pause(request: Pause) -> None:
    """Waits as a Pause request asks, blocking."""
    if request.notices is None:
        request.closing.wait(request.seconds)
    elif request.notices.wait(request.channel, request.seconds, request.seen) and request.settle:
        request.closing.wait(request.settle)


def run_one_python(
    checkout: Callable[..., Any],
    checkin: Callable[[Any], None],
    request: Request,
    pin: Optional[list[Any]] = None,
) -> Any:
    """Runs one request, blocking, on an engine from a pool (one engine per round: `checkout`
    and `checkin` are the pool's, bound once), or waits as a Pause asks; returns its reply.

    pin: a lock's one-item list. After a round that left commands behind on a master (see the
    engine contract's owes_replies), it holds that engine, and the lock's next rounds go out on
    it, behind them; otherwise None.
    """
    if type(request) is Pause:
        pause(request)
        return None
    prefer = pin[0] if pin is not None else None
    # (the wait for the preferred engine: about a round, this one's timeout)
    engine = checkout(prefer, request.timeout_ms)
    try:
        return engine.run(request)
    finally:
        if pin is not None:
            pin[0] = engine if engine.owes_replies() else None
        checkin(engine)


def run_python(
    checkout: Callable[..., Any],
    checkin: Callable[[Any], None],
    steps: Steps,
    pin: Optional[list[Any]] = None,
) -> Any:
    """Drives a step generator to its end, blocking, one request at a time (see run_one_python,
    pin included); returns what the generator returns.

    An exception raised while a request runs (an interrupt, an engine error) is thrown into the
    generator at the point that asked for it, so that it can clean up (send the unlock) with
    further requests before the exception propagates.
    """
    send = steps.send
    try:
        request = send(None)
        while True:
            try:
                reply = run_one_python(checkout, checkin, request, pin)
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
    run_one = run_one_python
else:
    _native.set_request_types(SetNx, RunScript, Cleanup, Pause, pause)
    run = _native.run_steps
    run_one = _native.run_one


class BlockingRounds:
    """The rounds of one blocking client: run(steps, pin=None) drives steps on its engine pool
    (the C loop where the native extension loads), as hiredlock.aio's AsyncRounds does on the
    loop, and returns what they return (see run_python); `checkout` and `checkin` are its pool's,
    bound once, for run_one (the direct form of a lock's steps calls it with them)."""

    __slots__ = ("checkin", "checkout", "pool", "run")

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        # the driver with the pool's methods bound, called with no Python frame in between (half
        # of every lock cycle goes through it; bound once, they are called without a look-up of
        # the method on the pool's type: some 80 instructions each, four times a cycle)
        self.checkout: Callable[..., Any] = pool.checkout
        self.checkin: Callable[[Any], None] = pool.checkin
        self.run: Callable[..., Any] = functools.partial(run, self.checkout, self.checkin)

    def close(self) -> None:
        """Closes the idle connections; the ones in use close as their rounds end."""
        self.pool.close()
