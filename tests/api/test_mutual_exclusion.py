"""4 processes x 500 acquisitions of one name.  A counter on a separate judge
redis-server, incremented non-atomically (GET then SET) under the lock, ends equal to the number of
successful acquisitions (lost updates would mean two holders at once)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from support import SUPPORT_DIR, assert_no_key, urls

WORKER = os.path.join(SUPPORT_DIR, "_mutex_worker.py")
PROCS = 4
ITERS = 500


def run_workers(engines, masters, judge, name):
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    env = {k: v for k, v in os.environ.items() if k != "HIREDLOCK_IMPL"}
    procs = []
    try:
        for eng in engines:
            procs.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        WORKER,
                        "--engine",
                        eng,
                        "--judge",
                        judge.url,
                        "--name",
                        name,
                        "--iters",
                        str(ITERS),
                        "--ready",
                        str(ready_w),
                        "--go",
                        str(go_r),
                        *urls(masters),
                    ],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    pass_fds=(ready_w, go_r),
                    env=env,
                )
            )
        os.close(ready_w)
        ready_w = None
        got = b""
        deadline = time.monotonic() + 60
        while len(got) < len(procs):  # all imported and connected: start together
            import select

            r, _, _ = select.select([ready_r], [], [], max(0.0, deadline - time.monotonic()))
            assert r, "workers did not become ready"
            chunk = os.read(ready_r, 16)
            assert chunk, "a worker died before it was ready: " + " | ".join(
                p.stderr.read().decode()[-2000:] for p in procs if p.poll() is not None
            )
            got += chunk
        t0 = time.monotonic()
        os.write(go_w, b"g" * len(procs))
        results = []
        for p in procs:
            out, err = p.communicate(timeout=180)
            assert p.returncode == 0, err.decode()[-3000:]
            results.append(json.loads(out.decode().strip().splitlines()[-1]))
        return results, time.monotonic() - t0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for fd in (ready_r, ready_w, go_r, go_w):
            if fd is not None:
                os.close(fd)


def check(results, judge, masters, name):
    succ = sum(r["successes"] for r in results)
    counter = int(judge.admin().get("counter") or 0)
    assert sum(r["overlaps"] for r in results) == 0, results
    assert counter == succ, f"counter {counter} != {succ} successful acquisitions: {results}"
    assert sum(r["lost"] for r in results) == 0, results
    assert succ == PROCS * ITERS, results  # 30 s timeout per acquire: all succeed
    assert_no_key(masters, name)


@pytest.mark.slow
@pytest.mark.subprocess
def test_mutual_exclusion_4x500(engine, masters5, capsys):
    masters, judge = masters5[:3], masters5[4]
    name = "mutex-counter-lock"
    results, elapsed = run_workers([engine] * PROCS, masters, judge, name)
    with capsys.disabled():
        print(f"\n[{engine}] {PROCS}x{ITERS} contended acquisitions on 3 masters: {elapsed:.2f}s")
    check(results, judge, masters, name)


@pytest.mark.slow
@pytest.mark.subprocess
def test_mutual_exclusion_mixed_engines_5_masters(masters5, redis_factory, capsys):
    """Both engines on one lock (2 native + 2 python workers), 5 masters, judge on a 6th server."""
    from support import no_extensions

    if no_extensions():
        pytest.skip("HIREDLOCK_NO_EXTENSIONS=1")
    (judge,) = redis_factory(1)
    name = "mutex-counter-lock-mixed"
    results, elapsed = run_workers(["native", "python"] * 2, masters5, judge, name)
    with capsys.disabled():
        print(f"\n[mixed] {PROCS}x{ITERS} contended acquisitions on 5 masters: {elapsed:.2f}s")
    check(results, judge, masters5, name)
