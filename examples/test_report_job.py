"""Tests of code that takes a lock, with the pytest plugin hiredlock installs (no conftest needed):

    pip install 'hiredlock[testing]'
    pytest test_report_job.py

`run_report` is the user's code: it runs the report only when it gets the lock, and stops when it
finds the lock lost. The first two tests use masters in memory (no server: the masters' clock is
moved on instead of waiting); the last one real redis-servers, one of them stopped.
"""

from __future__ import annotations

from hiredlock import LockLost, Redlock


def run_report(redlock: Redlock, rows: list[str], done: list[str], ttl: float = 30) -> str:
    """The code under test: the nightly report, over `rows`, once across all machines."""
    lock = redlock.lock("nightly-report", ttl=ttl)
    if not lock.acquire(blocking=False):
        return "skipped: another machine runs it"
    try:
        for row in rows:
            lock.extend()  # LockLost once the lock has expired: stop before the next row
            done.append(row)
    except LockLost:
        return "stopped: the lock was lost"
    lock.release()
    return "done"


def test_the_report_runs_once(memory_masters):
    masters = memory_masters(3)
    with Redlock(masters) as redlock, Redlock(masters) as other_machine:
        held = other_machine.lock("nightly-report", ttl=30)
        assert held.acquire(blocking=False)
        assert run_report(redlock, ["a", "b"], []) == "skipped: another machine runs it"
        held.release()
        done: list[str] = []
        assert run_report(redlock, ["a", "b"], done) == "done"
        assert done == ["a", "b"]


def test_the_report_stops_when_its_lock_expires(memory_masters):
    masters = memory_masters(3)

    class SlowRows(list):
        def __iter__(self):
            yield "a"
            masters.advance(31)  # the masters' clock passes the ttl while "a" is processed
            yield "b"

    done: list[str] = []
    with Redlock(masters) as redlock:
        assert run_report(redlock, SlowRows(), done) == "stopped: the lock was lost"
    assert done == ["a"]


def test_the_report_runs_with_a_master_stopped(redis_servers):
    servers = redis_servers(3)
    servers.stop(2)  # SIGSTOP: a majority of 2 out of 3 still answers
    done: list[str] = []
    with Redlock(servers.urls, master_timeout=0.1) as redlock:
        assert run_report(redlock, ["a"], done) == "done"
    assert done == ["a"]
