"""`make bench`: runs the benchmark suite in both placements and writes bench/results/REPORT.md.

    pinned    the pytest process under `taskset -c 0`; the redis-servers it starts inherit that
              affinity, so client and servers share CPU 0: a cycle costs client CPU + server CPU,
              with no cross-core wake-up (stable numbers);
    unpinned  default scheduling on every CPU: each round trip pays a cross-core wake-up and the
              result is round-trip bound (what users get on one host).

Each placement is one pytest run with its own five redis-servers, shared by all of its rows. The
machine state (nproc, load average at the start and the end of each run) goes into the report.

    python bench/run.py [--placements pinned,unpinned] [--report-only] [-- extra pytest args]

Environment knobs (see bench/timing.py and the test modules): BENCH_BUDGET, BENCH_CPU_CYCLES,
BENCH_CONTENDED_S, BENCH_HANDOFF_S.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import platform
import subprocess
import sys
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH_DIR)
RESULTS = os.environ.get("BENCH_RESULTS_DIR", os.path.join(BENCH_DIR, "results"))
NG_PYTHON = os.path.join(BENCH_DIR, ".venv-redlock-ng", "bin", "python")
PEERS = ["pottery", "redlock-py", "python-redis-lock", "redis", "pytest-benchmark", "matplotlib"]


def sh(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return ""


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def versions() -> dict:
    from importlib import metadata

    out = {}
    for name in ["hiredlock", *PEERS]:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    try:
        import hiredlock._native as native

        out["libhiredis"] = native.HIREDIS_VERSION
    except ImportError as exc:
        out["libhiredis"] = f"native engine missing: {exc}"
    out["redlock-ng"] = (
        sh(
            [
                NG_PYTHON,
                "-c",
                "from importlib import metadata; print(metadata.version('redlock-ng'))",
            ]
        )
        or None
        if os.access(NG_PYTHON, os.X_OK)
        else None
    )
    out["redis-server"] = sh(["redis-server", "--version"])
    return out


def machine() -> dict:
    mem_kb = 0
    try:
        with open("/proc/meminfo") as f:
            mem_kb = int(f.readline().split()[1])
    except (OSError, ValueError, IndexError):
        pass
    commit = sh(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"])
    dirty = bool(sh(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"]))
    return {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "cpu": cpu_model(),
        "nproc": os.cpu_count(),
        "mem_gib": round(mem_kb / 2**20, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "commit": commit + (" (uncommitted changes)" if dirty else ""),
        "versions": versions(),
    }


def run_placement(placement: str, pytest_args: list[str]) -> dict:
    ncpu = os.cpu_count() or 1
    cpus = "0" if placement == "pinned" else f"0-{ncpu - 1}"
    out_json = os.path.join(RESULTS, f"bench-{placement}.json")
    cmd = [
        "taskset",
        "-c",
        cpus,
        sys.executable,
        "-m",
        "pytest",
        os.path.join(BENCH_DIR),
        "-q",
        "-p",
        "no:cacheprovider",
        "-o",
        "faulthandler_timeout=0",
        f"--benchmark-json={out_json}",
        "--benchmark-columns=median,iqr,rounds",
        "--benchmark-sort=name",
        *pytest_args,
    ]
    env = dict(os.environ, BENCH_PLACEMENT=placement, BENCH_RESULTS_DIR=RESULTS)
    env.pop("HIREDLOCK_IMPL", None)
    state = {"cpus": cpus, "loadavg_start": os.getloadavg(), "start": time.time()}
    print(f"\n== {placement}: {' '.join(cmd)}", flush=True)
    rc = subprocess.call(cmd, cwd=ROOT, env=env)
    state.update(loadavg_end=os.getloadavg(), seconds=round(time.time() - state["start"]), rc=rc)
    return state


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--placements", default="pinned,unpinned")
    parser.add_argument("--report-only", action="store_true", help="rebuild REPORT.md only")
    parser.add_argument("pytest_args", nargs="*", help="passed to pytest (after --)")
    args = parser.parse_args()
    os.makedirs(RESULTS, exist_ok=True)
    rc = 0
    if not args.report_only:
        for stale in glob.glob(os.path.join(RESULTS, "*.json")):
            if not os.path.basename(stale).startswith("soak-"):
                os.remove(stale)
        info = machine()
        info["runs"] = {}
        for placement in args.placements.split(","):
            state = run_placement(placement, args.pytest_args)
            info["runs"][placement] = state
            rc = rc or state["rc"]
        with open(os.path.join(RESULTS, "machine.json"), "w") as f:
            json.dump(info, f, indent=1)
    sys.path.insert(0, BENCH_DIR)
    import report

    report.main(RESULTS)
    return rc


if __name__ == "__main__":
    sys.exit(main())
