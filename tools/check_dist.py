#!/usr/bin/env python3
"""Checks what hiredlock's distributions contain (make wheel-check and the wheels workflow).

    tools/check_dist.py --sdist dist/hiredlock-X.tar.gz [--wheel W.whl ...] [--pure W.whl ...]

sdist: everything a source build needs (the Cython source, setup.py, the license files, the build
script of the static hiredis, the tool that derives the direct form of the steps, the tests
cibuildwheel runs) and no build artefacts (no generated .c, no compiled objects, no caches).
--wheel: a binary wheel: exactly one hiredlock._native extension, every module of
hiredlock/_compiled.py's COMPILED compiled (beside its .py) and the manifest of their sources, no
C/Cython sources, both license files, the license expression, and every module of the sdist's
package.
--pure: the py3-none-any wheel (HIREDLOCK_NO_EXTENSIONS=1): no extension at all.
Exits non-zero with one line per problem.
"""

from __future__ import annotations

import argparse
import configparser
import fnmatch
import os
import runpy
import sys
import tarfile
import zipfile
from email.parser import Parser
from types import SimpleNamespace

# hiredlock/_compiled.py run from its file (importing it would import the package): its
# names, COMPILED, MANIFEST and source_digests among them
COMPILED_LIST = SimpleNamespace(
    **runpy.run_path(
        os.path.join(os.path.dirname(__file__), "..", "src", "hiredlock", "_compiled.py")
    )
)
LICENSE_EXPRESSION = "MIT AND BSD-3-Clause"
LICENSE_FILES = ("LICENSE", "LICENSE-hiredis")

SDIST_REQUIRED = (
    "setup.py",
    "pyproject.toml",
    "MANIFEST.in",
    "README.md",
    "CHANGELOG.md",
    "LICENSE",
    "LICENSE-hiredis",
    "PKG-INFO",
    "_native/engine.pyx",
    "_native/engine.pxd",
    "_native/resp.pxi",
    "_native/master.pxi",
    "_native/round.pxi",
    "_native/routing.pxi",
    "_native/round_events.pxi",
    "_native/steps.pxi",
    "_native/libhiredis.pxd",
    "src/hiredlock/_native.pxd",
    "src/hiredlock/_core/lock_state.pxd",
    "src/hiredlock/_core/lock_steps.pxd",
    "src/hiredlock/_sync/gate.pxd",
    "src/hiredlock/_core/session.pxd",
    "src/hiredlock/_engines/pool.pxd",
    "src/hiredlock/aio/_rounds.pxd",
    "src/hiredlock/aio/_driver.pxd",
    "src/hiredlock/__init__.py",
    "src/hiredlock/py.typed",
    "src/hiredlock/_native.pyi",
    "tools/build_hiredis.sh",
    "tools/blocking_steps.py",
    "tests/conftest.py",
    "tests/support/servers.py",
    "tests/support/support.py",
    "tests/engine/test_wheel_smoke.py",
    "tests/api/test_bad_input.py",
)
# Build artefacts and caches: never in a distribution.
FORBIDDEN = (
    "*.c",
    "*.o",
    "*.obj",
    "*.so",
    "*.pyd",
    "*.dylib",
    "*.a",
    "*.lib",
    "*.html",
    "*.pyc",
    "*/__pycache__/*",
    "build/*",
    "dist/*",
    ".venv/*",
    ".git/*",
)
WHEEL_FORBIDDEN = ("*.c", "*.pyx", "*.pxi", "*.pxd", "*.o", "*.h", "*.pyc", "*/__pycache__/*")


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatch(name, p) or fnmatch.fnmatch("/" + name, p) for p in patterns)


def sdist_names(path: str) -> list[str]:
    with tarfile.open(path) as tar:
        names = [m.name for m in tar.getmembers() if m.isfile()]
    roots = {n.split("/", 1)[0] for n in names}
    if len(roots) != 1:
        raise SystemExit(f"{path}: expected one top-level directory, got {sorted(roots)}")
    return [n.split("/", 1)[1] for n in names]


def check_sdist(path: str) -> tuple[list[str], list[str]]:
    problems = []
    names = sdist_names(path)
    for required in SDIST_REQUIRED:
        if required not in names:
            problems.append(f"{path}: missing {required}")
    for name in names:
        if _matches(name, FORBIDDEN):
            problems.append(f"{path}: must not contain {name}")
    modules = [n for n in names if n.startswith("src/hiredlock/") and n.endswith((".py", ".pyi"))]
    return problems, [m[len("src/") :] for m in modules]


def _metadata(zf: zipfile.ZipFile) -> tuple[str, dict]:
    (meta,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
    return meta.rsplit("/", 1)[0], Parser().parsestr(zf.read(meta).decode())


def check_wheel(path: str, pure: bool, modules: list[str]) -> list[str]:
    problems = []
    base = os.path.basename(path)
    tag = base[:-4].split("-")[-3:]
    with zipfile.ZipFile(path) as zf:
        names = zf.namelist()
        dist_info, meta = _metadata(zf)
    extensions = [
        n for n in names if n.startswith("hiredlock/_native.") and n.endswith((".so", ".pyd"))
    ]
    compiled = [n for n in names if n.endswith((".so", ".pyd")) and n not in extensions]
    if pure:
        if tag != ["py3", "none", "any"]:
            problems.append(f"{base}: a pure wheel must be py3-none-any, got {'-'.join(tag)}")
        if extensions or compiled:
            problems.append(f"{base}: the pure wheel contains {extensions + compiled}")
    else:
        if len(extensions) != 1:
            problems.append(f"{base}: expected one hiredlock/_native extension, got {extensions}")
        if tag[-1] == "any":
            problems.append(f"{base}: a binary wheel must have a platform tag")
        for module in COMPILED_LIST.COMPILED:
            stem = module.replace(".", "/")
            if not any(n.startswith(stem + ".") for n in compiled):
                problems.append(f"{base}: {module} is not compiled")
        manifest = f"hiredlock/{COMPILED_LIST.MANIFEST}"
        if manifest not in names:
            problems.append(f"{base}: missing {manifest} (what the build compiled)")
    for name in names:
        if _matches(name, WHEEL_FORBIDDEN):
            problems.append(f"{base}: must not contain {name}")
    for lic in LICENSE_FILES:
        if f"{dist_info}/licenses/{lic}" not in names:
            problems.append(f"{base}: missing {dist_info}/licenses/{lic}")
    if meta.get("License-Expression") != LICENSE_EXPRESSION:
        problems.append(
            f"{base}: License-Expression is {meta.get('License-Expression')!r}, "
            f"expected {LICENSE_EXPRESSION!r}"
        )
    for module in modules:
        if module not in names:
            problems.append(f"{base}: missing {module} (it is in the sdist)")
    entry_points = f"{dist_info}/entry_points.txt"
    if PYTEST_PLUGIN_ENTRY not in _entry_points(path, entry_points):
        problems.append(
            f"{base}: {entry_points} has no pytest11 entry point "
            f"{PYTEST_PLUGIN_ENTRY[1]} = {PYTEST_PLUGIN_ENTRY[2]} (users' fixtures)"
        )
    return problems


# The pytest plugin users' tests get their fixtures from: (group, name, module)
PYTEST_PLUGIN_ENTRY = ("pytest11", "hiredlock", "hiredlock.pytest_plugin")


def _entry_points(path: str, member: str) -> set[tuple[str, str, str]]:
    with zipfile.ZipFile(path) as zf:
        if member not in zf.namelist():
            return set()
        parser = configparser.ConfigParser(delimiters=("=",))
        parser.optionxform = str  # names keep their case
        parser.read_string(zf.read(member).decode())
    return {(group, name, value) for group in parser for name, value in parser[group].items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sdist", required=True)
    parser.add_argument("--wheel", action="append", default=[], help="a binary wheel")
    parser.add_argument("--pure", action="append", default=[], help="the py3-none-any wheel")
    args = parser.parse_args()
    problems, modules = check_sdist(args.sdist)
    for wheel in args.wheel:
        problems += check_wheel(wheel, False, modules)
    for wheel in args.pure:
        problems += check_wheel(wheel, True, modules)
    for problem in problems:
        print(f"check_dist: {problem}", file=sys.stderr)
    checked = [args.sdist, *args.wheel, *args.pure]
    if problems:
        print(f"check_dist: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"check_dist: OK: {', '.join(os.path.basename(p) for p in checked)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
