"""What the algorithm asks its driver for: the requests, as named types.

The algorithm (the lock kinds' step generators in _core/lockbase.py and _core/batches.py) is written
once, as generators that never do I/O and never wait: each yields a request (a round to run on every
master, or a pause) and is sent the round's results, or thrown the exception that interrupted it
(Ctrl-C, a cancelled task), so that what follows an interruption (the unlock) is written once too. A
driver runs the requests: hiredlock._engines.blocking.run blocks (the engines' own poll loops, a
wait on an event); hiredlock.aio awaits them on the event loop.

A request is one of the NamedTuples below, cheap to make on every round (new_request makes one
in C once compiled). A round's request (SetNx, RunScript, Cleanup) is what an engine runs
(engine.run(request), or engine.begin(request) for a driver that waits itself: see
_engines/contract.py); a driver tells them apart by type (`type(request) is Pause`). Being
tuples, they can be read by field index where speed matters (the native engine's steps driver):
its field indexes (_native/engine.pxd) mirror each NamedTuple's `_fields`, and
tests/engine/test_contract.py checks that they agree.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any, NamedTuple, Union, final

from .scripts import CLEANUP_WAIT_MS, Script

try:
    import cython  # type: ignore[import-untyped]
except ImportError:  # uncompiled, without Cython installed: only `compiled` is read
    from types import SimpleNamespace

    cython = SimpleNamespace(compiled=False)


@final  # (never subclassed: drivers tell requests apart by `type(request) is`)
class SetNx(NamedTuple):
    """SET key token NX PX ttl_ms on every master, for each (key, token): OK if set, TAKEN if
    the key exists."""

    keys: Sequence[bytes]
    tokens: Sequence[bytes]
    ttl_ms: int
    timeout_ms: float


@final
class RunScript(NamedTuple):
    """EVALSHA sha numkeys *argv on every master for each argv (EVAL source where needed: see
    the engine contract's run). honour_backoff: a best-effort round (an acquire, or the unlock
    after a failed attempt). acquires: the script's (see Script.acquires)."""

    sha: bytes
    source: bytes
    numkeys: int
    argvs: Sequence[tuple[bytes, ...]]
    timeout_ms: float
    wait_all: bool
    want_values: bool = False
    honour_backoff: bool = False
    acquires: bool = False


@final
class Cleanup(NamedTuple):
    """A RunScript made after an interruption, waiting CLEANUP_WAIT_MS at most: an asyncio
    driver shields it from a second cancellation; the blocking one just runs it. An engine runs
    it as the RunScript it holds the fields of."""

    sha: bytes
    source: bytes
    numkeys: int
    argvs: Sequence[tuple[bytes, ...]]
    timeout_ms: float
    wait_all: bool
    want_values: bool = False
    honour_backoff: bool = False
    acquires: bool = False


@final
class Pause(NamedTuple):
    """Wait before the next attempt: `seconds`, or less when `notices` (the client's release
    notices, see _engines/notices.py; None: a plain sleep) has a notice on `channel` sooner (or
    had one since it had heard `seen`: see heard_on), and then `settle` seconds more; cut short
    when the client closes (`closing`, its threading.Event). `channel` may be a tuple of channels
    (a multilock's): a notice on any of them ends the wait."""

    seconds: float
    notices: Any
    channel: Union[bytes, tuple[bytes, ...], None]
    settle: float
    seen: int
    closing: Any


RoundRequest = Union[SetNx, RunScript, Cleanup]
Request = Union[SetNx, RunScript, Cleanup, Pause]
Steps = Generator[Request, Any, Any]

# The C reader reads a Cleanup with RunScript's field indexes (see the module doc).
assert Cleanup._fields == RunScript._fields


def new_request(kind: type, fields: tuple[Any, ...]) -> Request:
    """A request of type `kind` from its `fields` (all of them, in order), as
    tuple.__new__(kind, fields) makes it: compiled, in C (requests.pxd's request_of), without that
    call through its Python signature and its copy of `fields` (some 550 instructions less, twice
    in every lock cycle)."""
    if cython.compiled:
        made: Request = request_of(kind, fields)  # type: ignore[name-defined]  # noqa: F821
    else:
        made = tuple.__new__(kind, fields)
    return made


def new_set_nx(
    keys: Sequence[bytes], tokens: Sequence[bytes], ttl_ms: int, timeout_ms: float
) -> SetNx:
    """SetNx(keys, tokens, ttl_ms, timeout_ms), made as new_request makes it, from the fields
    themselves (compiled, no tuple of them is made first: an acquire's every attempt)."""
    if cython.compiled:
        made: SetNx = set_nx_of(SetNx, keys, tokens, ttl_ms, timeout_ms)  # type: ignore[name-defined]  # noqa: F821
    else:
        made = tuple.__new__(SetNx, (keys, tokens, ttl_ms, timeout_ms))
    return made


def new_run_script(
    sha: bytes,
    source: bytes,
    numkeys: int,
    argvs: Sequence[tuple[bytes, ...]],
    timeout_ms: float,
    wait_all: bool,
    want_values: bool,
    honour_backoff: bool,
    acquires: bool,
) -> RunScript:
    """RunScript(...) of all its fields, made as new_set_nx makes a SetNx (a release's round)."""
    if cython.compiled:
        made: RunScript = run_script_of(  # type: ignore[name-defined]  # noqa: F821
            RunScript,
            sha,
            source,
            numkeys,
            argvs,
            timeout_ms,
            wait_all,
            want_values,
            honour_backoff,
            acquires,
        )
    else:
        fields = (sha, source, numkeys, argvs, timeout_ms, wait_all, want_values)
        made = tuple.__new__(RunScript, (*fields, honour_backoff, acquires))
    return made


def script(
    script: Script,
    numkeys: int,
    argvs: Sequence[tuple[bytes, ...]],
    timeout_ms: float,
    wait_all: bool,
    want_values: bool = False,
    honour_backoff: bool = False,
    kind: type[RunScript] | type[Cleanup] = RunScript,
) -> RunScript | Cleanup:
    """A request to run `script` for each argv on every master (see the engine contract); a
    clean-up (kind Cleanup) waits CLEANUP_WAIT_MS at most for the replies."""
    if kind is Cleanup and timeout_ms > CLEANUP_WAIT_MS:
        timeout_ms = CLEANUP_WAIT_MS
    return kind(
        script.sha,
        script.source,
        numkeys,
        argvs,
        timeout_ms,
        wait_all,
        want_values,
        honour_backoff,
        script.acquires,
    )


def channels_of(channel: bytes | tuple[bytes, ...]) -> tuple[bytes, ...]:
    """The channels of a Pause's `channel` (one, or a tuple of them)."""
    return channel if isinstance(channel, tuple) else (channel,)


def heard_on(heard: dict[bytes, int], channel: bytes | tuple[bytes, ...] | None) -> int:
    """How many notices the release notices' `heard` counted on `channel` (on all of a tuple's
    channels together): a waiter reads it before its attempt, and its wait ends at once when the
    count has moved since (a notice came in between)."""
    if isinstance(channel, tuple):
        count = 0
        for one in channel:
            count += heard.get(one, 0)
        return count
    return 0 if channel is None else heard.get(channel, 0)


def items_of(request: RoundRequest) -> int:
    """How many items (keys, or argvs) a round request has."""
    return len(request.keys) if type(request) is SetNx else len(request.argvs)
