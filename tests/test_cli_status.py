"""`hiredlock status NAME`: per master, key, PTTL and token prefix; then the majority verdict."""

from __future__ import annotations

import pytest
from test_cli_common import UNREACHABLE, USAGE, cli, env, masters, one_line_error

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
