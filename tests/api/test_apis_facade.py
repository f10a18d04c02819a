"""The facade that runs the sync API tests on hiredlock.aio (support/apis.py) does what it claims:
the async parametrisation really drives an AsyncRedlock, each calling thread is served by one task
(so RLock ownership per thread maps to AsyncRLock ownership per task), and exceptions come back as
the very instances raised, KeyboardInterrupt included, without stopping the loop."""

from __future__ import annotations

import asyncio
import threading

import pytest
from apis import LoopThread, make_redlock_fixture, pytest_generate_tests  # noqa: F401  (both APIs)
from support import assert_no_key, urls

import hiredlock
import hiredlock.aio


@pytest.fixture
def runner():
    loop_thread = LoopThread()
    yield loop_thread
    loop_thread.close()


def current_task(runner):
    async def which():
        return asyncio.current_task()

    return runner.call(which)


def test_async_param_drives_the_asyncio_api(api, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    lock = rl.lock(key, 5)
    rlock = rl.rlock(key + ":r", 5)
    if api == "sync":
        assert type(rl) is hiredlock.Redlock and type(lock) is hiredlock.Lock
        assert type(rlock) is hiredlock.RLock
    else:
        assert type(rl._target) is hiredlock.aio.AsyncRedlock
        assert type(lock._target) is hiredlock.aio.AsyncLock
        assert type(rlock._target) is hiredlock.aio.AsyncRLock
        assert isinstance(lock.lost._target, asyncio.Event)
    assert lock.acquire(blocking=False) is True
    assert lock.lost.wait(0.01) is False and not lock.lost.is_set()
    lock.release()
    assert_no_key(masters5, key)


def test_one_task_per_calling_thread(runner):
    mine = current_task(runner)
    assert mine is not None and current_task(runner) is mine, "one thread, two tasks"
    theirs = []
    t = threading.Thread(target=lambda: theirs.extend([current_task(runner), current_task(runner)]))
    t.start()
    t.join(10)
    assert len(theirs) == 2 and theirs[0] is theirs[1], theirs
    assert theirs[0] is not mine, "two threads share one task"
    assert not mine.done(), "the task of a thread must live on between its calls"


@pytest.mark.parametrize("exc_type", [ValueError, hiredlock.LockLost, KeyboardInterrupt])
def test_exceptions_come_back_unchanged(runner, exc_type):
    raised = exc_type("from the task")

    async def fail():
        raise raised

    with pytest.raises(exc_type) as caught:
        runner.call(fail)
    assert caught.value is raised
    assert runner.thread.is_alive(), "the exception stopped the event loop"
    assert runner.run(lambda: 42) == 42


def test_synchronized_body_runs_in_the_callers_task(api, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    seen = []

    @rl.synchronized(key, 5)
    def body():
        seen.append(threading.current_thread())
        return "done"

    assert body() == "done"
    if api == "sync":
        assert seen == [threading.current_thread()]
    else:
        assert seen == [make_redlock.runner.thread], "the body did not run in the event loop"
    assert_no_key(masters5, key)
