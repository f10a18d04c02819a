"""The pytest plugin users get with hiredlock (hiredlock.pytest_plugin, entry point "hiredlock").

Our own suite runs with it loaded through its entry point, as a user's does: the fault helpers of
`redis_servers` are tested here directly, on both engines and both APIs. A user's project in a
temporary directory (pytester) runs the docs' example test (tests/testing/user_project/, kept
identical to the copy in docs/testing.md) on both engines. The user project's files are not named
test_*.py so that this suite does not collect them itself: each run copies them in as test_*.py.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import redis
from apis import make_redlock_fixture, pytest_generate_tests  # noqa: F401  (sync and async APIs)

import hiredlock.pytest_plugin
from hiredlock import Outcome, QuorumUnreachable

pytest_plugins = ["pytester"]

HERE = Path(__file__).resolve().parent
USER_PROJECT = HERE / "user_project"
TESTING_PAGE = HERE.parent.parent / "docs" / "testing.md"
EXAMPLE_SECTION = "## An example"


def _client(url):
    return redis.Redis.from_url(url, socket_timeout=0.2, retry_on_timeout=False)


def _user_project(pytester):
    for source in sorted(USER_PROJECT.glob("*.py")):
        shutil.copy(source, pytester.path / f"test_{source.name}")


# -- the plugin in our own suite -------------------------------------------------------------------


def test_the_plugin_is_loaded_once_through_its_entry_point(request):
    manager = request.config.pluginmanager
    assert manager.get_plugin("hiredlock") is hiredlock.pytest_plugin
    loaded = [
        name for name, plugin in manager.list_name_plugin() if plugin is hiredlock.pytest_plugin
    ]
    assert loaded == ["hiredlock"]


def test_stopped_servers_answer_nothing_until_resumed(make_redlock, redis_servers, key):
    servers = redis_servers(3)
    redlock = make_redlock(servers.urls, master_timeout=0.1, retry_count=1)
    servers.stop(0)
    servers.stop(1)
    with pytest.raises(QuorumUnreachable) as raised:
        redlock.lock(key, 10).acquire(blocking=False)
    outcomes = {vote.master: vote.outcome for vote in raised.value.votes}
    assert [outcomes[servers.urls[i]] for i in (0, 1)] == [Outcome.TIMEOUT] * 2
    assert all(alive for alive in map(servers.alive, range(3)))  # stopped is not dead
    servers.resume(0)
    lock = redlock.lock(key, 10)
    assert lock.acquire(blocking=False)
    lock.release()


def test_a_killed_server_loses_its_keys_and_restarts_empty_on_its_url(
    make_redlock, redis_servers, key
):
    servers = redis_servers(3)
    urls, pid = servers.urls, servers.pids[0]
    redlock = make_redlock(servers.urls)
    lock = redlock.lock(key, 30)
    assert lock.acquire(blocking=False)
    servers.kill(0)
    assert not servers.alive(0)
    with pytest.raises(redis.ConnectionError):
        _client(urls[0]).ping()
    servers.restart(0)
    assert servers.urls == urls and servers.pids[0] != pid
    admin = _client(urls[0])
    assert admin.info("server")["process_id"] == servers.pids[0]
    assert admin.dbsize() == 0  # nothing kept across the restart
    assert _client(urls[1]).exists(key) == 1
    lock.release()  # two of three still held it: a quorum
    assert _client(urls[1]).exists(key) == 0


def test_a_stopped_server_can_be_killed_and_restarted(redis_servers):
    servers = redis_servers(1)
    servers.stop(0)
    servers.restart(0)  # kills the stopped process first
    assert _client(servers.urls[0]).ping()


@pytest.mark.parametrize("count", [0, -1, 2.0, True, "3"])
def test_a_bad_count_names_the_argument(redis_servers, count):
    with pytest.raises(ValueError, match=r"redis_servers\(count\)"):
        redis_servers(count)


# -- a user's project ------------------------------------------------------------------------------


def test_the_docs_example_is_the_tested_copy():
    if not TESTING_PAGE.exists():
        pytest.skip("tests run outside the source tree (the wheel check): no docs here")
    text = TESTING_PAGE.read_text(encoding="utf-8")
    assert EXAMPLE_SECTION in text, f"docs/testing.md has no {EXAMPLE_SECTION!r} section"
    section = text.split(EXAMPLE_SECTION, 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    example = (USER_PROJECT / "readme_example.py").read_text(encoding="utf-8")
    assert example in blocks, (
        "docs/testing.md's example test differs from user_project/readme_example.py"
    )


def test_a_user_project_passes_with_the_plugin(pytester, engine, monkeypatch):
    monkeypatch.setenv("HIREDLOCK_IMPL", engine)
    _user_project(pytester)
    pytester.makepyfile(
        test_engine=f"""
        from hiredlock import Redlock

        def test_the_engine_asked_for(redis_servers):
            with Redlock(redis_servers(1).urls) as redlock:
                assert redlock.backend == {engine!r}
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    example_tests = len(
        re.findall(r"^def test_", (USER_PROJECT / "readme_example.py").read_text(), re.M)
    )
    result.assert_outcomes(passed=example_tests + 1)


def test_every_server_is_killed_when_the_test_ends(pytester):
    # Checked by the next test in the same process: the servers would die with the process anyway
    pytester.makepyfile(
        """
        import os
        import pytest

        pids = []

        def test_start(redis_servers):
            servers = redis_servers(2)
            servers.stop(1)  # a stopped server is killed too
            pids.extend(servers.pids)
            for pid in pids:
                os.kill(pid, 0)

        def test_gone():
            assert len(pids) == 2
            for pid in pids:
                with pytest.raises(ProcessLookupError):
                    os.kill(pid, 0)
        """
    )
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=2)


def test_no_redis_server_fails_saying_how_to_install_one(pytester, tmp_path, monkeypatch):
    empty = tmp_path / "bin"
    empty.mkdir()
    pytester.makepyfile(
        """
        def test_start(redis_servers):
            redis_servers(1)
        """
    )
    monkeypatch.setenv("PATH", str(empty))  # the interpreter is run by its full path
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(errors=0, failed=1)
    result.stdout.fnmatch_lines(
        ["*no redis-server found: install one (apt-get install redis-server)*"]
    )
    result.stdout.fnmatch_lines(["*use the memory_masters fixture, which needs no server*"])


def test_pytest_runs_without_the_testing_extra(pytester, monkeypatch):
    """The plugin is loaded wherever hiredlock is installed: without lupa and redis-py it must
    still load, and only the tests using its fixtures fail (at setup), saying what to install."""
    blocked = pytester.mkdir("blocked")
    for name in ("lupa", "redis"):
        (blocked / name).mkdir()
        (blocked / name / "__init__.py").write_text(f"raise ImportError('no {name} here')\n")
    pytester.makepyfile(
        """
        def test_plain():
            assert True

        def test_memory(memory_masters):
            memory_masters(3)

        def test_servers(redis_servers):
            redis_servers(1)
        """
    )
    monkeypatch.setenv("PYTHONPATH", str(blocked))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rfE")
    result.assert_outcomes(passed=1, errors=2)
    result.stdout.fnmatch_lines(
        ["memory_masters needs lupa (no lupa here): pip install 'hiredlock[testing]'"]
    )
    result.stdout.fnmatch_lines(
        ["redis_servers needs redis (no redis here): pip install 'hiredlock[testing]'"]
    )


def test_the_plugin_can_be_turned_off(pytester):
    pytester.makepyfile(
        """
        def test_start(redis_servers):
            pass
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:hiredlock")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'redis_servers' not found*"])
