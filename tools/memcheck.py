"""Runs some tests under valgrind's memcheck and fails on any invalid read or write, or use of an
uninitialised value, whose stack passes through hiredlock's compiled code (the native engine,
the compiled modules): the C memory errors a test's own asserts cannot see (a read one byte before
an array changes nothing visible, most of the time).

    python tools/memcheck.py [pytest arguments]      (make memcheck)

Python runs with PYTHONMALLOC=malloc, so that memcheck sees every block; CPython's and other
libraries' own reports (there are thousands, all outside hiredlock) are ignored. Slow: a test
takes about 30 times as long as usual, so give it a few tests, not the suite.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile

# memcheck's reports of memory misuse (leaks are not looked at: --leak-check=no)
_KINDS = re.compile(r"^==\d+== (Invalid (read|write|free)|Conditional jump|Use of uninitialised)")
_OURS = re.compile(r"hiredlock")


def reports(log: str) -> list[str]:
    """memcheck's reports in `log` (its text) whose stack passes through hiredlock's code."""
    found = []
    for block in re.split(r"^==\d+== *$", log, flags=re.MULTILINE):
        block = block.strip()
        if block and _KINDS.match(block) and _OURS.search(block):
            found.append(block)
    return found


def main(argv: list[str]) -> int:
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("memcheck: valgrind is missing (apt-get install valgrind)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        log_path = os.path.join(tmp, "memcheck.%p.log")
        command = [
            valgrind,
            "--tool=memcheck",
            "--leak-check=no",
            "--error-limit=no",
            "--trace-children=no",
            f"--log-file={log_path}",
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            *argv,
        ]
        env = dict(os.environ, PYTHONMALLOC="malloc")
        rc = subprocess.call(command, env=env)
        found = []
        for name in sorted(os.listdir(tmp)):
            with open(os.path.join(tmp, name), encoding="utf-8", errors="replace") as log:
                found += reports(log.read())
    for report in found:
        print(report, file=sys.stderr)
    if found:
        print(f"memcheck: {len(found)} memory errors in hiredlock's code", file=sys.stderr)
        return 1
    if rc != 0:
        print(f"memcheck: the tests failed under valgrind (pytest exit {rc})", file=sys.stderr)
        return rc
    print("memcheck: no memory error in hiredlock's code")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
