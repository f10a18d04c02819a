"""What hiredlock.otel.instrument() costs per acquire+release cycle: user-space instructions
(valgrind's callgrind, when installed) and wall time, with no observer, with an observer that does
nothing (what the events themselves cost), with the OpenTelemetry API alone (no SDK: every
instrument a no-op), and with the SDK's meter and tracer providers but no exporter (a metric reader
that is never collected, no span processor): the measurements are aggregated, the spans made and
dropped. Not part of `make bench` nor of CI: run it by hand after
`make bench` built bench/build/libcref.so (for the instruction counts), e.g.

    .venv/bin/python bench/otel_overhead.py --cycles 2000 --masters 3

It starts its own redis-servers (as the tests do) and prints one table.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH_DIR)
sys.path.insert(1, os.path.join(os.path.dirname(BENCH_DIR), "tests", "support"))

# no observer; an observer that does nothing (the events' own cost); instrument() on the
# OpenTelemetry API alone; instrument() on the SDK with no exporter
MODES = ("none", "events", "api", "sdk")
ENGINES = ("native", "python")


def setup(mode: str) -> None:
    """Instruments this process as `mode` says (before any client is made)."""
    if mode == "none":
        return
    if mode == "events":
        from hiredlock._core.events import add_default_observer

        add_default_observer(lambda event: None)
        return
    import hiredlock.otel

    if mode == "sdk":
        from opentelemetry import metrics, trace
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import InMemoryMetricReader
        from opentelemetry.sdk.trace import TracerProvider

        metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
        trace.set_tracer_provider(TracerProvider())
    hiredlock.otel.instrument()


def worker(mode: str, engine: str, ports: list[int], cycles: int, instrument: bool) -> None:
    """Runs in its own process (under callgrind when `instrument`): warm-up, then `cycles` timed
    cycles; prints the seconds they took and the failed cycles."""
    from libs import CRefLib, open_cycle

    setup(mode)
    cycler = open_cycle(engine, ports, f"bench:otel:{mode}:{engine}")
    cref = CRefLib.load() if instrument else None
    try:
        cycler.run(max(50, cycles // 5))
        if cref is not None and not cref.cref_instrument(1):
            raise SystemExit("libcref.so was built without valgrind/callgrind.h")
        t0 = time.perf_counter()
        cycler.run(cycles)
        seconds = time.perf_counter() - t0
        if cref is not None:
            cref.cref_instrument(0)
    finally:
        cycler.close()
    print(f"seconds={seconds!r} failures={len(cycler.failures)}")


def run_worker(args: list[str], valgrind: str | None, tmp: str) -> tuple[float, int | None]:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", *args]
    if valgrind is not None:
        cmd = [valgrind, "--tool=callgrind", "--instr-atstart=no"]
        cmd += [f"--callgrind-out-file={tmp}/cg.%p", sys.executable, os.path.abspath(__file__)]
        cmd += ["--worker", *args, "--instrument"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if proc.returncode:
        raise SystemExit(f"worker {args} failed:\n{proc.stderr[-3000:]}")
    seconds = float(re.search(r"seconds=(\S+)", proc.stdout).group(1))
    instructions = None
    if valgrind is not None:
        dumps = [p for p in glob.glob(f"{tmp}/cg.*") if re.search(r"\.\d+\.\d+$", p)]
        with open(dumps[0]) as f:
            instructions = int(re.search(r"^totals: (\d+)", f.read(), re.M).group(1))
        for path in glob.glob(f"{tmp}/cg.*"):
            os.unlink(path)
    return seconds, instructions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=2000, help="timed cycles per run")
    parser.add_argument("--masters", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5, help="wall-time runs per row (median)")
    parser.add_argument("--icycles", type=int, default=500, help="cycles counted by callgrind")
    parser.add_argument("--worker", nargs=4, metavar=("MODE", "ENGINE", "PORTS", "CYCLES"))
    parser.add_argument("--instrument", action="store_true")
    options = parser.parse_args()
    if options.worker:
        mode, engine, ports, cycles = options.worker
        worker(mode, engine, [int(p) for p in ports.split(",")], int(cycles), options.instrument)
        return

    from servers import RedisServer

    valgrind = shutil.which("valgrind")
    if valgrind and not os.path.exists(os.path.join(BENCH_DIR, "build", "libcref.so")):
        print("bench/build/libcref.so is missing (make bench builds it): no instruction counts")
        valgrind = None
    servers = [RedisServer() for _ in range(options.masters)]
    ports = ",".join(str(s.port) for s in servers)
    rows: dict[tuple[str, str], tuple[float, int | None]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="hlbench-otel-") as tmp:
            for engine in ENGINES:
                walls: dict[str, list[float]] = {mode: [] for mode in MODES}
                for _ in range(options.repeats):  # interleaved: the machine's load hits all
                    for mode in MODES:
                        args = [mode, engine, ports, str(options.cycles)]
                        walls[mode].append(run_worker(args, None, tmp)[0] / options.cycles)
                for mode in MODES:
                    counted = None
                    if valgrind is not None:
                        args = [mode, engine, ports, str(options.icycles)]
                        counted = run_worker(args, valgrind, tmp)[1]
                        counted = counted // options.icycles if counted else None
                    rows[engine, mode] = (statistics.median(walls[mode]), counted)
    finally:
        for server in servers:
            server.cleanup()

    print(f"N={options.masters} masters, acquire+release per cycle")
    print("| engine | observer | instructions/cycle | vs none | wall us/cycle | vs none |")
    print("|---|---|---:|---:|---:|---:|")
    for engine in ENGINES:
        base_wall, base_instr = rows[engine, "none"]
        for mode in MODES:
            wall, instr = rows[engine, mode]
            instr_text = f"{instr:,}" if instr else "-"
            ratio = f"{instr / base_instr:.3f}" if instr and base_instr else "-"
            print(
                f"| {engine} | {mode} | {instr_text} | {ratio} | {wall * 1e6:.1f} "
                f"| {wall / base_wall:.3f} |"
            )


if __name__ == "__main__":
    main()
