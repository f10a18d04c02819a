"""What the algorithm asks its driver for, and the blocking driver.

The algorithm (the lock kinds' step generators in _lockbase.py and _batches.py) is written once,
as generators that never do I/O and never wait: each yields a request (a round to run on every
master, or a pause) and is sent the round's results, or thrown the exception that interrupted it
(Ctrl-C, a cancelled task), so that what follows an interruption (the unlock) is written once
too. A driver runs the requests: `run()` below blocks (the engines' own poll loops, time.sleep);
hiredlock.aio awaits them on the event loop.

A request is a pair (kind, arguments), cheap to make on every round:
    (SET_NX, (keys, tokens, ttl_ms, timeout_ms))    engine.set_nx's arguments
    (SCRIPT, (sha, source, numkeys, argvs, timeout_ms, wait_all, want_values, honour_backoff))
                                                    engine.run_script's arguments
    (CLEANUP, the same as SCRIPT)                   a round made after an interruption, waiting
                                                    CLEANUP_WAIT_MS at most: an asyncio driver
                                                    shields it from a second cancellation; the
                                                    blocking one just runs it
    (PAUSE, (seconds, notices, channel, settle, seen, closing))
                                                    wait before the next attempt: `seconds`,
                                                    or less when `notices` (the client's release
                                                    notices, see _notices.py; None: a plain
                                                    sleep) has a notice on `channel` sooner (or
                                                    had one since it had heard `seen`), and
                                                    then `settle` seconds more; cut short when
                                                    the client closes (`closing`, its
                                                    threading.Event)
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any, Optional

from ._scripts import CLEANUP_WAIT_MS, Script

SET_NX = 0
SCRIPT = 1
CLEANUP = 2
PAUSE = 3

Request = tuple[int, Any]
Steps = Generator[Request, Any, Any]


def script(
    script: Script,
    numkeys: int,
    argvs: Sequence[tuple[bytes, ...]],
    timeout_ms: float,
    wait_all: bool,
    want_values: bool = False,
    honour_backoff: bool = False,
    kind: int = SCRIPT,
) -> Request:
    """A request to run `script` for each argv on every master (see the engine contract); a
    clean-up waits CLEANUP_WAIT_MS at most for the replies."""
    if kind == CLEANUP and timeout_ms > CLEANUP_WAIT_MS:
        timeout_ms = CLEANUP_WAIT_MS
    return kind, (
        script.sha,
        script.source,
        numkeys,
        argvs,
        timeout_ms,
        wait_all,
        want_values,
        honour_backoff,
    )


def pause(args: tuple) -> None:
    """Waits as a PAUSE request asks, blocking."""
    seconds, notices, channel, settle, seen, closing = args
    if notices is None:
        closing.wait(seconds)
    elif notices.wait(channel, seconds, seen) and settle:
        closing.wait(settle)


def begin_on_engine(engine: Any, kind: int, args: tuple) -> Any:
    """A round begun on an engine, to be fed events by a driver (engine.finish gives its
    results)."""
    if kind == SET_NX:
        return engine.begin_set_nx(*args)
    return engine.begin_script(*args)


def run_python(steps: Steps, pool: Any, pin: Optional[list] = None) -> Any:
    """Drives a step generator to its end, blocking, on engines from `pool` (one engine per
    round); returns what the generator returns.

    An exception raised while a request runs (an interrupt, an engine error) is thrown into the
    generator at the point that asked for it, so that it can clean up (send the unlock) with
    further requests before the exception propagates.

    pin: a lock's one-item list. After a round that left commands behind on a master (see the
    engine contract's owes_replies), it holds that engine, and the lock's next rounds go out on
    it, behind them; otherwise None.
    """
    send = steps.send
    try:
        kind, args = send(None)
        while True:
            try:
                if kind == PAUSE:
                    pause(args)
                    reply = None
                else:
                    prefer = pin[0] if pin is not None else None
                    # (the wait for the preferred engine: about a round, this one's timeout)
                    engine = pool.checkout(prefer, args[3] if kind == SET_NX else args[4])
                    try:
                        run_round = engine.set_nx if kind == SET_NX else engine.run_script
                        reply = run_round(*args)
                    finally:
                        if pin is not None:
                            pin[0] = engine if engine.owes_replies() else None
                        pool.checkin(engine)
            except BaseException as exc:
                kind, args = steps.throw(exc)
                continue
            kind, args = send(reply)
    except StopIteration as stop:
        return stop.value


try:  # the same loop in C where the native extension loads (see _native/engine.pyx)
    from . import _native
except ImportError:
    run = run_python
else:
    _native.set_step_kinds(SET_NX, PAUSE, pause)
    run = _native.run_steps
