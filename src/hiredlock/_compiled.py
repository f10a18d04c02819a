"""The modules a build compiles from their own .py files (Cython in pure-Python mode; the .pxd
beside some of them declares their classes as extension types with typed fields), and the check
that no compiled module is run in place of a .py it was not compiled from.

The same .py files run uncompiled wherever their compiled twins are missing (a build with
HIREDLOCK_NO_COMPILE=1 or HIREDLOCK_NO_EXTENSIONS=1; see setup.py): one source, two ways to run
it, so no rule is written twice.

Python imports an extension module before the .py of the same name. In a tree installed in
editable mode (`pip install -e .`, `make install`), a .py edited after the last build would not
run, silently: each build writes the digests of the sources of every module it compiled into
MANIFEST, beside the package's __init__.py, and check() (run as hiredlock is imported) refuses an
extension module whose sources changed since, or one that the last build did not make. (An
installed wheel has the .py files but not the .pxd ones: there, the .py is compared alone.)

This module imports nothing from hiredlock: setup.py loads it from its file.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from importlib.machinery import EXTENSION_SUFFIXES

# The hot path of a lock's acquire and release (Lock's methods, a lock's state and steps, the
# judgement of a round, the clock, the session, the state mutex, the engine pool and the blocking
# client's rounds, the local gates, the tokens, the requests, a name's keys, the client whose
# lock() makes a lock object per use, the direct form of the steps for a blocking client), and
# asyncio's (AsyncLock's methods, its local gate, the rounds that batch tasks' requests, the
# driver of the loop callbacks, its client).
COMPILED = (
    "hiredlock._core.clock",
    "hiredlock._core.keys",
    "hiredlock._core.tokens",
    "hiredlock._core.requests",
    "hiredlock._core.judgement",
    "hiredlock._core.session",
    "hiredlock._core.state_mutex",
    "hiredlock._core.lock_state",
    "hiredlock._core.lock_steps",
    "hiredlock._engines.pool",
    "hiredlock._engines.blocking",
    "hiredlock._core.local_gate",
    "hiredlock._sync.gate",
    "hiredlock._sync.blocking_steps",
    "hiredlock._lock",
    "hiredlock._redlock",
    "hiredlock.aio._gate",
    "hiredlock.aio._driver",
    "hiredlock.aio._rounds",
    "hiredlock.aio._lock",
    "hiredlock.aio._redlock",
)

# {module name: source_digests() of the sources it was compiled from}, written by every build
MANIFEST = "_compiled.json"


def source_digests(py_path: str) -> dict[str, str]:
    """The digests of what a module is compiled from: {"py": its .py's, "pxd": the .pxd's beside
    it} (no "pxd" when there is none)."""
    digests = {}
    for kind, path in (("py", py_path), ("pxd", py_path[: -len(".py")] + ".pxd")):
        if os.path.exists(path):
            with open(path, "rb") as f:
                digests[kind] = hashlib.sha256(f.read()).hexdigest()
    return digests


def check(package_dir: str) -> None:
    """Raises ImportError when an extension module in the package (the hiredlock directory
    `package_dir`) stands beside a .py it was not compiled from."""
    try:
        with open(os.path.join(package_dir, MANIFEST)) as f:
            built: dict[str, dict[str, str]] = json.load(f)
    except FileNotFoundError:
        built = {}
    root = os.path.dirname(package_dir)
    for directory, subdirs, files in os.walk(package_dir):
        subdirs[:] = [name for name in subdirs if name != "__pycache__"]
        for name in files:
            stem = _extension_stem(name)
            if stem is None or stem + ".py" not in files:
                continue  # (not an extension module, or one with no .py: the native engine)
            compiled = os.path.join(directory, name)
            source = os.path.join(directory, stem + ".py")
            module = os.path.relpath(source, root)[: -len(".py")].replace(os.sep, ".")
            if module not in built:
                raise ImportError(_stale(compiled, f"{compiled} was not made by the last build"))
            now = source_digests(source)
            then = built[module]
            for kind in now:  # (the .pxd only where it is: a source tree, not a wheel)
                if now[kind] != then.get(kind):
                    changed = source[: -len(".py")] + "." + kind
                    why = f"{compiled} was compiled from an earlier version of {changed}"
                    raise ImportError(_stale(compiled, why))


def compiled_modules() -> list[str]:
    """The modules of COMPILED that run compiled in this process (imported ones only)."""
    return [
        name
        for name in COMPILED
        if _extension_stem(os.path.basename(getattr(sys.modules.get(name), "__file__", "") or ""))
    ]


def _extension_stem(filename: str) -> str | None:
    for suffix in EXTENSION_SUFFIXES:  # (the most specific first: .cpython-3XX-...so, .so)
        if filename.endswith(suffix):
            return filename[: -len(suffix)]
    return None


def _stale(compiled: str, why: str) -> str:
    return (
        f"hiredlock: {why}, and Python would import it instead of the .py. Build again "
        f"(`make install`, or `pip install -e .`), or delete {compiled} to run the .py as it is."
    )
