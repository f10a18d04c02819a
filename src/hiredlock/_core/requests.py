"""What the algorithm asks its driver for.

The algorithm (the lock kinds' step generators in _core/lockbase.py and _core/batches.py) is written
once, as generators that never do I/O and never wait: each yields a request (a round to run on every
master, or a pause) and is sent the round's results, or thrown the exception that interrupted it
(Ctrl-C, a cancelled task), so that what follows an interruption (the unlock) is written once too. A
driver runs the requests: hiredlock._engines.blocking.run blocks (the engines' own poll loops, a
wait on an event); hiredlock.aio awaits them on the event loop.

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
                                                    notices, see _engines/notices.py; None: a plain
                                                    sleep) has a notice on `channel` sooner (or
                                                    had one since it had heard `seen`), and
                                                    then `settle` seconds more; cut short when
                                                    the client closes (`closing`, its
                                                    threading.Event)
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

from .scripts import CLEANUP_WAIT_MS, Script

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
