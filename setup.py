"""Build script: the pure-Python package plus one optional extension, hiredlock._native.

The extension links libhiredis, found with pkg-config or under $HIREDIS_PREFIX.
HIREDLOCK_NO_EXTENSIONS=1 builds the pure-Python package; HIREDLOCK_REQUIRE_EXTENSIONS=1 turns a
failed extension build into a failed install (CI sets it, so a broken build never passes as pure).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

MISSING_HIREDIS = (
    "hiredlock: libhiredis was not found. Install its headers (Debian/Ubuntu: "
    "apt-get install libhiredis-dev pkg-config; Fedora: dnf install hiredis-devel; "
    "macOS: brew install hiredis), or set HIREDIS_PREFIX to a hiredis install, or set "
    "HIREDLOCK_NO_EXTENSIONS=1 for the pure-Python package."
)


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _hiredis_flags() -> dict[str, list[str]] | None:
    """Compiler and linker flags for libhiredis, or None when it cannot be found."""
    prefix = os.environ.get("HIREDIS_PREFIX")
    if prefix:
        return {
            "include_dirs": [os.path.join(prefix, "include")],
            "library_dirs": [os.path.join(prefix, "lib")],
            "libraries": ["hiredis"],
            "extra_link_args": [],
        }
    try:
        cflags = subprocess.run(
            ["pkg-config", "--cflags", "hiredis"], check=True, capture_output=True, text=True
        ).stdout
        libs = subprocess.run(
            ["pkg-config", "--libs", "hiredis"], check=True, capture_output=True, text=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    flags: dict[str, list[str]] = {
        "include_dirs": [],
        "library_dirs": [],
        "libraries": [],
        "extra_link_args": [],
    }
    for token in shlex.split(cflags):
        if token.startswith("-I"):
            flags["include_dirs"].append(token[2:])
    for token in shlex.split(libs):
        if token.startswith("-L"):
            flags["library_dirs"].append(token[2:])
        elif token.startswith("-l"):
            flags["libraries"].append(token[2:])
        else:
            flags["extra_link_args"].append(token)
    return flags


class OptionalBuildExt(build_ext):
    """Builds the extension; falls back to pure Python unless the extension is required."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:
            self._give_up(exc)

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            self._give_up(exc)

    def _give_up(self, exc: BaseException) -> None:
        if _flag("HIREDLOCK_REQUIRE_EXTENSIONS"):
            raise
        print(
            f"hiredlock: building the native engine failed ({exc}); installing the pure-Python "
            "engine only. Set HIREDLOCK_REQUIRE_EXTENSIONS=1 to make this fatal.",
            file=sys.stderr,
        )


def _extensions() -> list[Extension]:
    if _flag("HIREDLOCK_NO_EXTENSIONS"):
        return []
    flags = _hiredis_flags()
    if flags is None:
        if _flag("HIREDLOCK_REQUIRE_EXTENSIONS"):
            sys.exit(MISSING_HIREDIS)
        print(MISSING_HIREDIS + " Installing the pure-Python engine only.", file=sys.stderr)
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        if _flag("HIREDLOCK_REQUIRE_EXTENSIONS"):
            sys.exit("hiredlock: Cython 3 is needed to build the native engine.")
        return []
    ext = Extension(
        "hiredlock._native",
        sources=["_native/engine.pyx"],
        extra_compile_args=["-O2"],
        **flags,
    )
    return cythonize(
        [ext],
        compiler_directives={"language_level": "3"},
        quiet=True,
    )


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
