"""User-space instructions per acquire+release cycle, counted by valgrind's callgrind: the client's
CPU cost without the noise of a shared machine (the kernel's side of the syscalls is not counted:
see test_cpu.py for user+sys time). Each count is split by where the instructions ran: the Python
interpreter, hiredlock's native engine, libhiredis, libc, the rest.

The rows aio-native and aio-python count hiredlock.aio's cycle the same way: one task on one event
loop, acquire(blocking=False) + release of one lock object (count_instructions.py). Each sits
beside the sync row of its engine, on the same masters: the difference is what running the cycle
on an event loop costs (asyncio's loop and futures, hiredlock.aio's rounds and driver).

The asyncio rows with ":100" run 100 tasks on distinct names, as the 100-task rows of
test_async.py do, beside redis-py's asyncio Lock with hiredis (run by bench/.venv-hiredis's
interpreter, as there) and aio-floor: no lock, the floor of any asyncio client's cycle on this
loop (two round trips, a future each; async_libs.FloorTasks).

Placement does not change the counts, so they are taken in the unpinned run only. Skipped when
valgrind is not installed (`apt-get install valgrind`; `make bench` tries to install it). With
BENCH_CG_DIR set, each row's callgrind dump is kept there (cg.<row>.<pid>.1, for
callgrind_annotate) instead of in a temporary directory.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest
from async_libs import HIREDIS_PYTHON
from libs import BENCH_DIR

CYCLES = int(os.environ.get("BENCH_INSTR_CYCLES", "1000"))
ROWS = [(1, "native"), (1, "fresh-native"), (1, "python"), (1, "fresh-python")]
ROWS += [(1, "cref"), (1, "redis-py")]
ROWS += [(5, "native"), (5, "python"), (5, "cref")]
ROWS += [(n, lib) for n in (1, 5) for lib in ("aio-native", "aio-python")]
ROWS += [(1, "aio-native:100"), (5, "aio-native:100"), (1, "aio-floor"), (1, "aio-floor:100")]
ROWS += [(1, "redis-py-aio-hiredis"), (1, "redis-py-aio-hiredis:100")]
SCRIPT = os.path.join(BENCH_DIR, "count_instructions.py")
# Rows run by another interpreter, as test_async.py runs them: row -> the library it counts there
REMOTE_ROWS = {"redis-py-aio-hiredis": "redis-py-aio"}


def where(obj: str) -> str:
    name = os.path.basename(obj)
    if name.startswith("libpython") or name.startswith("python"):
        return "interpreter"
    if name.startswith("_native"):
        return "native engine"
    if name.startswith("libhiredis"):
        return "libhiredis"
    if name.startswith("libc.so") or name.startswith("libc-"):
        return "libc"
    return "other"


def self_cost_by_object(path: str) -> dict[str, int]:
    """Exclusive Ir per object (ob=) from a callgrind dump; call costs (after calls=) skipped."""
    names: dict[str, str] = {}
    costs: dict[str, int] = {}
    ob = "?"
    skip_next = False
    with open(path) as f:
        for line in f:
            if skip_next:
                skip_next = False
                continue
            if line.startswith(("ob=", "cob=")):
                # Names are compressed: "(id) name" the first time, "(id)" after; ob= and cob=
                # share one table. Only ob= sets the object of the costs that follow.
                m = re.match(r"c?ob=\((\d+)\)(?: (.*))?", line.strip())
                if m and m.group(2):
                    names[m.group(1)] = m.group(2)
                if line.startswith("ob="):
                    ob = names.get(m.group(1), "?") if m else line[3:].strip()
            elif line.startswith("calls="):
                skip_next = True
            elif line[:1].isdigit() or line[:1] in "+-*":
                parts = line.split()
                if len(parts) >= 2 and parts[1].isdigit():
                    costs[ob] = costs.get(ob, 0) + int(parts[1])
    return costs


@pytest.mark.parametrize(("n", "lib"), ROWS, ids=[f"N{n}-{lib}" for n, lib in ROWS])
def test_instructions(ports, placement, recorder, n, lib):
    if placement == "pinned":
        pytest.skip("instruction counts do not depend on placement: taken in the unpinned run")
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        pytest.skip("valgrind is not installed (apt-get install valgrind)")
    python, counted = sys.executable, lib
    row, _, tasks = lib.partition(":")
    if row in REMOTE_ROWS:
        python = HIREDIS_PYTHON
        if not os.access(python, os.X_OK):
            pytest.skip(f"{python} is missing: `make bench` makes bench/.venv-hiredis")
        counted = REMOTE_ROWS[row] + (f":{tasks}" if tasks else "")
    keep = os.environ.get("BENCH_CG_DIR")
    with tempfile.TemporaryDirectory(prefix="hlbench-cg-") as scratch:
        tmp = scratch
        if keep:
            tmp = os.path.join(keep, f"N{n}-{lib}".replace(":", "x"))
            os.makedirs(tmp, exist_ok=True)
            for old in glob.glob(f"{tmp}/cg.*"):
                os.remove(old)
        cmd = [
            valgrind,
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={tmp}/cg.%p",
            python,
            SCRIPT,
            counted,
            ",".join(str(p) for p in ports[:n]),
            str(CYCLES),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if proc.returncode and "without valgrind/callgrind.h" in proc.stderr + proc.stdout:
            pytest.skip("bench/build/libcref.so was built without valgrind's headers")
        assert proc.returncode == 0, proc.stderr[-3000:]
        dumps = [p for p in glob.glob(f"{tmp}/cg.*") if re.search(r"\.\d+\.\d+$", p)]
        assert len(dumps) == 1, (dumps, proc.stderr[-2000:])
        with open(dumps[0]) as f:
            total = int(re.search(r"^totals: (\d+)", f.read(), re.M).group(1))
        by_object = self_cost_by_object(dumps[0])
    split: dict[str, float] = {}
    for obj, cost in by_object.items():
        split[where(obj)] = split.get(where(obj), 0) + cost / CYCLES
    failures = int(re.search(r"failures=(\d+)", proc.stdout).group(1))
    recorder.add(
        kind="instructions",
        lib=lib,
        n=n,
        cycles=CYCLES,
        per_cycle=total / CYCLES,
        split=split,
        failures=failures,
    )
