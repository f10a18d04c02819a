"""The operators' side of the command: `hiredlock run` tells its command about its lock (which a
process it starts can adopt by token), its busy exit status is configurable, `hiredlock status`
shows owner labels and `hiredlock unlock NAME --yes` clears a stuck name."""

from __future__ import annotations

import sys
import textwrap

import pytest
from cli_support import UNREACHABLE, USAGE, cli, env, masters, one_line_error
from support import assert_no_key, kb, values

from hiredlock import Redlock

pytestmark = pytest.mark.subprocess

# The command `hiredlock run` starts: prints what it learnt of its lock, then adopts the lock by
# its token from a process of its own (sync or asyncio API) and extends it to 40 s.
ADOPTING_CHILD = """
    import asyncio, json, os, sys
    import hiredlock, hiredlock.aio
    masters = sys.argv[1].split(",")
    name, token = os.environ["HIREDLOCK_LOCK_NAME"], os.environ["HIREDLOCK_TOKEN"]
    owner = os.environ.get("HIREDLOCK_OWNER")
    told = ("LOCK_NAME", "TOKEN", "VALIDITY", "TTL", "FENCE", "OWNER")
    report = {f"HIREDLOCK_{k}": os.environ[f"HIREDLOCK_{k}"] for k in told}
    if sys.argv[2] == "sync":
        with hiredlock.Redlock(masters) as redlock:
            lock = redlock.lock(name, 40, token=token, owner=owner)
            report["before"] = lock.validity
            lock.extend()
            report["after"] = lock.validity
    else:
        async def main():
            async with hiredlock.aio.AsyncRedlock(masters) as redlock:
                lock = redlock.lock(name, 40, token=token, owner=owner)
                report["before"] = lock.validity
                await lock.extend()
                report["after"] = lock.validity
        asyncio.run(main())
    print(json.dumps(report))
"""


def python(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code), *args]


@pytest.mark.parametrize("api", ["sync", "async"])
def test_run_passes_the_lock_on_and_a_child_extends_it_by_token(engine, masters5, key, api):
    import json

    urls = ",".join(s.url for s in masters5)
    proc = cli(
        "run", key, *masters(masters5), "--ttl", "5", "--fencing", "--owner", "cron:7",
        "--", *python(ADOPTING_CHILD, urls, api),
        environ=env(HIREDLOCK_IMPL=engine),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["HIREDLOCK_LOCK_NAME"] == key
    assert len(report["HIREDLOCK_TOKEN"]) == 40
    assert 0 < float(report["HIREDLOCK_VALIDITY"]) <= 5
    assert report["HIREDLOCK_TTL"] == "5"
    assert int(report["HIREDLOCK_FENCE"]) >= 1
    assert report["HIREDLOCK_OWNER"] == "cron:7"
    # adopted: no validity until the extend proved it (for the child's 40 s, past run's 5)
    assert report["before"] == 0.0 and 35 < report["after"] <= 40
    assert_no_key(masters5, key, "(run released the lock the child extended)")


def test_run_without_fencing_or_owner_sets_neither(engine, masters5, key):
    code = "import os; print(os.environ.get('HIREDLOCK_FENCE'), os.environ.get('HIREDLOCK_OWNER'))"
    stale = env(HIREDLOCK_IMPL=engine, HIREDLOCK_FENCE="99", HIREDLOCK_OWNER="outer")
    proc = cli("run", key, *masters(masters5), "--", *python(code), environ=stale)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["None", "None"]


@pytest.mark.parametrize(("code", "status"), [("0", 0), ("3", 3), ("255", 255)])
def test_busy_exit_code_is_configurable(engine, masters5, key, code, status):
    with Redlock([s.url for s in masters5], backend=engine) as redlock, redlock.lock(key, 10):
        proc = cli(
            "run", key, *masters(masters5), "--busy-exit-code", code, "--", "echo", "ran",
            environ=env(HIREDLOCK_IMPL=engine),
        )  # fmt: skip
    assert proc.returncode == status, proc.stderr
    assert "ran" not in proc.stdout
    assert "is busy" in one_line_error(proc.stderr)


@pytest.mark.parametrize("code", ["256", "-1", "x"])
def test_busy_exit_code_out_of_range_is_a_usage_error(masters5, key, code):
    proc = cli("run", key, *masters(masters5), "-E", code, "--", "echo", "ran")
    assert proc.returncode == USAGE
    assert "busy-exit-code" in one_line_error(proc.stderr) and "ran" not in proc.stdout


def test_status_shows_the_owner_label(engine, masters5, key):
    redlock = Redlock([s.url for s in masters5], backend=engine)
    with redlock, redlock.lock(key, 30, owner="web-3:4242") as lock:
        token = lock.token
        proc = cli("status", key, *masters(masters5))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("owner: 'web-3:4242'") == 5
    assert f"token {token[:8]}, owner 'web-3:4242'" in proc.stdout
    rows = [line.split() for line in proc.stdout.splitlines() if line.startswith("redis://")]
    assert [cells[4] for cells in rows] == [token[:8]] * 5  # the token, not the stored value


def test_unlock_refuses_without_yes(masters5, key):
    with Redlock([s.url for s in masters5]) as redlock, redlock.lock(key, 30) as lock:
        proc = cli("unlock", key, *masters(masters5))
        assert proc.returncode == USAGE
        assert "without --yes" in one_line_error(proc.stderr)
        assert values(masters5, key) == [kb(lock.token)] * 5


def test_unlock_clears_a_stuck_lock_and_says_what_it_removed(engine, masters5, key):
    with Redlock([s.url for s in masters5], backend=engine) as holder:
        stuck = holder.lock(key, 60)
        assert stuck.acquire(blocking=False)
        permit = holder.semaphore(key, 2, 60).acquire(blocking=False)
        assert permit is not None
        proc = cli("unlock", key, "--yes", *masters(masters5), environ=env(HIREDLOCK_IMPL=engine))
        assert proc.returncode == 0, proc.stderr
        tail = f"{{{key}}} (1)"  # (the name's tag: see the key layout)
        removed = f"{key} (1), hiredlock:permit:size:{tail}, hiredlock:permit:*:{tail}"
        assert proc.stdout.count(removed) == 5, proc.stdout
        assert f"unlocked {key!r}: keys removed on 5 of 5 masters" in proc.stdout
        assert_no_key(masters5, key)
        assert stuck.lost.is_set() is False  # (told at its next extend or release)
    proc = cli("unlock", key, "--yes", *masters(masters5))
    assert proc.returncode == 0 and proc.stdout.count("nothing") == 5


def test_unlock_with_a_minority_answering_is_unreachable(redis_factory, masters5, key):
    for server in masters5[:3]:
        server.kill()
    proc = cli("unlock", key, "--yes", *masters(masters5))
    assert proc.returncode == UNREACHABLE, proc.stderr
    assert "only 2 of 5 masters answered" in proc.stdout
