"""Event loops for the tests of what only hiredlock.aio has (cancellation, aclose(), 1,000 tasks,
a stopped master): every such test runs on the standard asyncio loop and on uvloop.

    from aio_support import run_async  # noqa: F401  (the fixture)

    def test_x(engine, masters5, run_async):
        async def main(): ...
        run_async(main())

`run_async(coroutine)` runs it to its end on a fresh loop of the parametrised kind (asyncio.Runner
with that loop factory) and returns its result; inside, the running loop is checked to be of that
kind, and a hang becomes a failure after HANG_TIMEOUT seconds instead of blocking the suite.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Callable

import pytest
from support import EXTRA_SLACK

LOOPS = ["asyncio", "uvloop"]

# A test's coroutine that has not ended after this long is stuck (each test here ends in seconds).
HANG_TIMEOUT = 120.0 + EXTRA_SLACK


def loop_factory(kind: str) -> Callable[[], asyncio.AbstractEventLoop]:
    """A function making a new event loop of `kind` ("asyncio" or "uvloop")."""
    if kind == "uvloop":
        import uvloop

        return uvloop.new_event_loop
    return asyncio.new_event_loop


def loop_kind(loop: asyncio.AbstractEventLoop) -> str:
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


@pytest.fixture(params=LOOPS, ids=LOOPS)
def run_async(request) -> Callable[[Coroutine[Any, Any, Any]], Any]:
    kind = request.param
    if kind == "uvloop":
        pytest.importorskip("uvloop", reason="uvloop is not installed")
    factory = loop_factory(kind)

    async def checked(coroutine: Coroutine[Any, Any, Any]) -> Any:
        running = loop_kind(asyncio.get_running_loop())
        if running != kind:
            coroutine.close()
            raise AssertionError(f"the test asked for a {kind} loop and runs on {running}")
        async with asyncio.timeout(HANG_TIMEOUT):
            return await coroutine

    def run(coroutine: Coroutine[Any, Any, Any]) -> Any:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(checked(coroutine))

    run.kind = kind  # type: ignore[attr-defined]
    return run
