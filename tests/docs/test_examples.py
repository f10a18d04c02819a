"""The programs of examples/ run as a reader would run them, against the suite's real servers,
their masters given in HIREDLOCK_MASTERS (the one place every example reads them from), on each
engine (HIREDLOCK_IMPL for the programs run as processes)."""

from __future__ import annotations

import asyncio
import importlib.util
import os
import shutil
import subprocess
import sys
import time

import httpx
import pytest
from markdown_blocks import ROOT

from hiredlock._engines import selection
from hiredlock.aio import AsyncRedlock

EXAMPLES = ROOT / "examples"
if not EXAMPLES.is_dir():  # the suite run from an sdist or against a wheel: no examples there
    pytest.skip("no examples/ beside the tests", allow_module_level=True)

BUSY = 75  # hiredlock run: the lock is held by another holder


@pytest.fixture
def example_env(engine, masters5):
    env = {
        **os.environ,
        "HIREDLOCK_MASTERS": ",".join(server.url for server in masters5[:3]),
        "HIREDLOCK_IMPL": engine,
    }
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def _run(args, env, cwd=EXAMPLES, timeout=60):
    result = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, (
        f"{args}: exit {result.returncode}\n{result.stdout}{result.stderr}"
    )
    return result.stdout


def _wait_for(path, process, seconds=20.0):
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def test_cron_job_runs_on_one_machine_at_a_time(example_env, tmp_path):
    started, finish = tmp_path / "started", tmp_path / "finish"
    report = (
        "import pathlib, time\n"
        f"pathlib.Path({str(started)!r}).touch()\n"
        f"while not pathlib.Path({str(finish)!r}).exists(): time.sleep(0.01)\n"
        "print('report done')\n"
    )
    first = subprocess.Popen(
        [str(EXAMPLES / "cron_job.sh"), sys.executable, "-c", report],
        env=example_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _wait_for(started, first)
        second = subprocess.run(
            [str(EXAMPLES / "cron_job.sh"), sys.executable, "-c", "print('ran twice')"],
            env=example_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == BUSY, (second.returncode, second.stdout, second.stderr)
        assert "ran twice" not in second.stdout
        finish.touch()
        out, err = first.communicate(timeout=60)
        assert first.returncode == 0, (out, err)
        assert "report done" in out
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()


def test_fastapi_endpoint_ships_an_order_once(engine, example_env, monkeypatch):
    monkeypatch.setattr(selection, "DEFAULT_ENGINE", selection.engine_class(engine))
    monkeypatch.setenv("HIREDLOCK_MASTERS", example_env["HIREDLOCK_MASTERS"])
    spec = importlib.util.spec_from_file_location(
        "fastapi_endpoint", EXAMPLES / "fastapi_endpoint.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    masters = example_env["HIREDLOCK_MASTERS"].split(",")
    app = module.app

    async def requests():
        transport = httpx.ASGITransport(app=app)
        # The lifespan is what the server runs at start-up and shutdown.
        async with app.router.lifespan_context(app), AsyncRedlock(masters) as other_replica:
            client = httpx.AsyncClient(transport=transport, base_url="http://service")
            assert app.state.redlock.backend == engine
            held = other_replica.lock("order:7", ttl=10)
            assert await held.acquire(blocking=False)  # another replica is shipping order 7
            refused = await client.post("/orders/7/ship")
            assert refused.status_code == 409, refused.text
            await held.release()
            shipped = await client.post("/orders/7/ship")
            assert shipped.status_code == 200, shipped.text
            assert shipped.json() == {"shipped": 7}
            await client.aclose()

    asyncio.run(requests())
    assert module.SHIPPED == [7]


def test_worker_pool_encodes_at_most_three_at_a_time(example_env):
    out = _run([sys.executable, "worker_pool.py"], example_env)
    assert "encoded 24 videos, at most" in out  # the script asserts the bound itself


def test_cache_refresh_never_reads_a_half_written_cache(example_env):
    out = _run([sys.executable, "cache_refresh.py"], example_env)
    assert "cache versions seen" in out  # the readers assert what they read


def test_fenced_write_refuses_the_late_holder(example_env):
    out = _run([sys.executable, "fenced_write.py"], example_env)
    assert "A's late write accepted: False" in out


def test_a_users_tests_pass_with_the_plugin(example_env, tmp_path):
    shutil.copy(EXAMPLES / "test_report_job.py", tmp_path)
    out = _run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_report_job.py"],
        example_env,
        cwd=tmp_path,
        timeout=120,
    )
    assert "3 passed" in out, out
