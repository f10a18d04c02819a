"""`hiredlock status NAME`: per master, key, PTTL and token prefix; then the majority verdict."""

from __future__ import annotations

import pytest
from cli_support import UNREACHABLE, USAGE, cli, env, masters, one_line_error

from hiredlock import Redlock

pytestmark = pytest.mark.subprocess

HELD, NOT_HELD = 0, 1


def rows(stdout: str) -> dict[str, list[str]]:
    """The table's rows (plain output: stdout is not a terminal), by master URL."""
    out = {}
    for line in stdout.splitlines():
        if line.startswith(("redis://", "unix://")):
            cells = line.split()
            out[cells[0]] = cells[1:]
    return out


def test_a_free_lock(masters5, key):
    proc = cli("status", key, *masters(masters5))
    assert proc.returncode == NOT_HELD, proc.stderr
    table = rows(proc.stdout)
    assert sorted(table) == sorted(s.url for s in masters5)
    assert all(cells[0] == "no" for cells in table.values())
    assert "not held by a majority: 0 of 5 masters" in proc.stdout


def test_a_held_lock_shows_pttl_and_token_prefix(masters5, key):
    with Redlock([s.url for s in masters5]) as redlock, redlock.lock(key, ttl=30) as lock:
        proc = cli("status", key, *masters(masters5))
        assert proc.returncode == HELD, proc.stderr
        for cells in rows(proc.stdout).values():
            exists, seconds, unit, token = cells[:4]
            assert exists == "yes"
            assert 25 < float(seconds) <= 30 and unit == "s"
            assert token == lock.token[:8]
        assert f"held by a majority: 5 of 5 masters hold {key!r} (quorum 3)" in proc.stdout
        assert f"token {lock.token[:8]}" in proc.stdout


def test_a_minority_of_keys_is_not_held_and_foreign_values_show(masters5, key):
    for server in masters5[:2]:
        server.admin().set(key, "1")  # a naive lock: no token, no expiry
    proc = cli("status", key, *masters(masters5))
    assert proc.returncode == NOT_HELD
    table = rows(proc.stdout)
    assert table[masters5[0].url] == ["yes", "no", "expiry", "'1'"]
    assert table[masters5[4].url][0] == "no"
    assert "2 of 5 masters" in proc.stdout


def test_dead_masters_are_shown_and_a_majority_still_decides(masters5, key):
    with Redlock([s.url for s in masters5]) as redlock, redlock.lock(key, ttl=30):
        for server in masters5[3:]:
            server.kill()
        proc = cli("status", key, *masters(masters5))
    assert proc.returncode == HELD, proc.stdout
    table = rows(proc.stdout)
    assert table[masters5[4].url][:3] == ["-", "-", "-"]
    assert "conn_error" in table[masters5[4].url][3]
    assert "3 of 5 masters hold" in proc.stdout


def test_unreachable_masters_cannot_tell(masters5, key):
    for server in masters5[:3]:
        server.kill()
    proc = cli("status", key, *masters(masters5))
    assert proc.returncode == UNREACHABLE
    assert "unknown: only 2 of 5 masters answered (quorum 3)" in proc.stdout


def test_empty_name(masters5):
    proc = cli("status", "", *masters(masters5))
    assert proc.returncode == USAGE
    assert "name" in one_line_error(proc.stderr)


def test_plain_output_without_rich(masters5, key, tmp_path):
    (tmp_path / "rich").mkdir()
    (tmp_path / "rich" / "__init__.py").write_text("raise ImportError('no rich here')\n")
    proc = cli("status", key, *masters(masters5), environ=env(PYTHONPATH=str(tmp_path)))
    assert proc.returncode == NOT_HELD, proc.stderr
    assert len(rows(proc.stdout)) == 5


def test_a_read_locked_rwlock_is_held_by_its_readers(engine, masters5, key):
    with Redlock([s.url for s in masters5], backend=engine) as redlock:
        rwlock = redlock.rwlock(key, 30)
        readers = [rwlock.read(), rwlock.read()]
        for reader in readers:
            assert reader.acquire(blocking=False)
        proc = cli("status", key, *masters(masters5), environ=env(HIREDLOCK_IMPL=engine))
    assert proc.returncode == HELD, proc.stdout + proc.stderr
    table = rows(proc.stdout)
    assert all("rwlock: 2 readers" in " ".join(cells) for cells in table.values()), proc.stdout
    assert f"read-locked by a majority: 5 of 5 masters have readers of {key!r}" in proc.stdout


def test_a_write_locked_rwlock_is_held_by_its_writer(engine, masters5, key):
    with Redlock([s.url for s in masters5], backend=engine) as redlock:
        assert redlock.rwlock(key, 30).write().acquire(blocking=False)
        proc = cli("status", key, *masters(masters5), environ=env(HIREDLOCK_IMPL=engine))
    assert proc.returncode == HELD, proc.stdout + proc.stderr
    assert f"write-locked by a majority: 5 of 5 masters have a writer of {key!r}" in proc.stdout


def test_a_semaphore_shows_which_permits_are_held(engine, masters5, key):
    with Redlock([s.url for s in masters5], backend=engine) as redlock:
        semaphore = redlock.semaphore(key, 5, 30)
        permits = [semaphore.acquire(blocking=False) for _ in range(2)]
        assert all(permit is not None for permit in permits)
        indexes = sorted(permit.index for permit in permits)
        # A third permit held on a minority only: shown on its masters, not counted as held.
        minority = max(set(range(5)) - set(indexes))  # (the permits are taken in random order)
        for server in masters5[:2]:
            server.admin().set(f"hiredlock:permit:{minority}:{{{key}}}", "x" * 40, px=30_000)
        proc = cli("status", key, *masters(masters5), environ=env(HIREDLOCK_IMPL=engine))
    assert proc.returncode == HELD, proc.stdout + proc.stderr
    listed = ", ".join(str(index) for index in indexes)
    table = rows(proc.stdout)
    minority_listed = ", ".join(str(i) for i in sorted([*indexes, minority]))
    assert f"semaphore: permits {minority_listed}" in " ".join(table[masters5[0].url])
    assert f"semaphore: permits {listed}" in " ".join(table[masters5[4].url])
    assert (
        f"semaphore {key!r}: 2 permits held by a majority (permits {listed}; quorum 3); "
        "5 permits, 3 free" in proc.stdout
    )
    # the size stored with the semaphore, and the permits held on each master
    assert "(3 of 5 held)" in " ".join(table[masters5[0].url])
    assert "(2 of 5 held)" in " ".join(table[masters5[4].url])


def test_a_semaphore_permit_on_a_minority_is_not_held(masters5, key):
    for server in masters5[:2]:
        server.admin().set(f"hiredlock:permit:0:{{{key}}}", "x" * 40, px=30_000)
    proc = cli("status", key, *masters(masters5))
    assert proc.returncode == NOT_HELD, proc.stdout + proc.stderr
    assert "semaphore: permit 0" in " ".join(rows(proc.stdout)[masters5[0].url])
    assert "not held by a majority" in proc.stdout


def test_without_redis_py_says_how_to_install_it(masters5, key, tmp_path):
    (tmp_path / "redis").mkdir()
    (tmp_path / "redis" / "__init__.py").write_text("raise ImportError('no redis-py here')\n")
    proc = cli("status", key, *masters(masters5), environ=env(PYTHONPATH=str(tmp_path)))
    assert proc.returncode == USAGE, proc.stderr
    assert "pip install 'hiredlock[cli]'" in one_line_error(proc.stderr)
    assert "internal error" not in proc.stderr
    assert proc.stdout == ""
