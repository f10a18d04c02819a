"""Counts the user-space instructions of `cycles` acquire+release cycles of one library, under
`valgrind --tool=callgrind --instr-atstart=no` (run by bench/test_instructions.py).

    count_instructions.py LIB PORT[,PORT...] CYCLES [TLS_CA]

LIB is a row of libs.py (the sync cycle), or an asyncio row of async_libs.py (aio-native,
aio-python, redis-py-aio, pottery-aio, and aio-floor: see ASYNC_LIBS): ONE task on one event loop
doing acquire(blocking=False) + release of one lock object, as in the wall-clock asyncio rows;
LIB:T (e.g. aio-native:100) runs T tasks on distinct names instead, CYCLES in all (CYCLES/T per
task), as the 100-task rows do. With TLS_CA, the ports are TLS ports whose certificates that CA
file signed (the sync cycle of hiredlock and redis-py only).

The warm-up (imports, connections, script caches) runs uninstrumented; cref_instrument() (in
bench/build/libcref.so) switches counting on for the measured cycles only and dumps them.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from libs import CRefLib, Cycler, open_cycle

# The asyncio rows: one task (unless LIB says :T), so that a cycle is one task's acquire+release
# and nothing else. redis-py-aio and pottery-aio are async_libs' peers, run in this interpreter
# (redis-py-aio in bench/.venv-hiredis's python is the row "with hiredis"); aio-floor is no lock
# but the floor of any asyncio client's cycle on this loop (async_libs.FloorTasks).
ASYNC_LIBS = ("aio-native", "aio-python", "redis-py-aio", "pottery-aio", "aio-floor")


def tasks_of(lib: str) -> tuple[str, int]:
    """("aio-native", 100) for "aio-native:100"; one task without a count."""
    row, _, tasks = lib.partition(":")
    return row, int(tasks) if tasks else 1


def open_counted(lib: str, ports: list[int], name: str, tls_ca: str | None) -> Cycler:
    lib, tasks = tasks_of(lib)
    if lib not in ASYNC_LIBS:
        return open_cycle(lib, ports, name, tls_ca)
    if tls_ca is not None:
        raise SystemExit(f"{lib}: no TLS row")
    # Imported only here: the sync rows' process stays as it was (no asyncio imported).
    from async_libs import open_tasks

    # run(k) is one round of k cycles in each task: the round's own start and end (a
    # run_until_complete, two futures, the tasks' wake-ups) are counted too, once per k cycles:
    # about 130,000 instructions by hand for one task (run(0) counted alone), 0.13k per cycle at
    # 1,000.
    return open_tasks(lib, ports, tasks, name)


def main() -> None:
    lib, ports, cycles = sys.argv[1], [int(p) for p in sys.argv[2].split(",")], int(sys.argv[3])
    tls_ca = sys.argv[4] if len(sys.argv) > 4 else None
    c = CRefLib.load()
    c.cref_instrument.restype = c.cref_instrument.restype  # int
    cycler = open_counted(lib, ports, f"bench:instructions:{lib}:{len(ports)}", tls_ca)
    tasks = tasks_of(lib)[1]
    if cycles % tasks:
        raise SystemExit(f"CYCLES ({cycles}) is not a multiple of the tasks ({tasks})")
    try:
        cycler.run(max(50, cycles // 5) // tasks or 1)
        if not c.cref_instrument(1):
            raise SystemExit("libcref.so was built without valgrind/callgrind.h")
        cycler.run(cycles // tasks)
        c.cref_instrument(0)
    finally:
        cycler.close()
    print(f"failures={len(cycler.failures)}")


if __name__ == "__main__":
    main()
