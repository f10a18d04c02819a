"""Build script: the pure-Python package plus one extension, hiredlock._native (the native engine).

The extension links libhiredis (0.14 or newer):

* HIREDIS_PREFIX=/path: the hiredis installed there. Its static lib/libhiredis.a when there is
  one (tools/build_hiredis.sh builds it; the wheels on PyPI are built so), with every hiredis
  symbol kept out of the extension's exports; otherwise its shared library, with an rpath.
* otherwise pkg-config's hiredis (Debian/Ubuntu: libhiredis-dev), or plain -lhiredis when
  pkg-config is missing.
* Windows (MSVC): HIREDIS_PREFIX only, with the static lib/hiredis.lib that
  tools/build_hiredis.ps1 builds (CMake's name for it), linked with ws2_32 and crypt32.

Before compiling, a probe compiles and links a tiny program against that hiredis. A source build
that cannot have the native engine FAILS with a message saying what to install: the extension is
never left out silently (pip hides a build's output unless it fails). HIREDLOCK_NO_EXTENSIONS=1
builds the pure-Python package on purpose. HIREDLOCK_REQUIRE_EXTENSIONS=1 (cibuildwheel and CI set
it) spells out that default; with HIREDLOCK_NO_EXTENSIONS=1 as well it is an error.

The Cython source is translated into the build directory: no generated .c lands in the tree, the
sdist or the wheel.
"""

from __future__ import annotations

import glob
import os
import shlex
import subprocess
import sys
import tempfile

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

try:  # setuptools >= 59 vendors these; plain distutils is gone from Python 3.12
    from setuptools.errors import CompileError, ExecError, LinkError
except ImportError:  # pragma: no cover
    from distutils.errors import CompileError, LinkError
    from distutils.errors import DistutilsExecError as ExecError

PYX_SOURCE = "_native/engine.pyx"
# engine.pyx includes its parts (_native/*.pxi); its table of contents is _native/engine.pxd,
# read by Cython as src/hiredlock/_native.pxd (the .pxd of a module named hiredlock._native).
PXD_ROOT = "src"

HOW_TO_GET_HIREDIS = (
    "Install libhiredis with its headers, and pkg-config (Debian/Ubuntu: apt-get install "
    "libhiredis-dev pkg-config; Fedora/RHEL: dnf install hiredis-devel pkgconf; Alpine: apk add "
    "hiredis-dev pkgconf; macOS: brew install hiredis pkg-config), or set HIREDIS_PREFIX to a "
    "hiredis installation (tools/build_hiredis.sh in the sdist builds a static one), or set "
    "HIREDLOCK_NO_EXTENSIONS=1 to install the pure-Python package without the native engine."
)
HOW_TO_GET_HIREDIS_WINDOWS = (
    "On Windows the native engine links a static hiredis built by tools/build_hiredis.ps1 (in "
    "the sdist; needs CMake and Visual Studio): run it with HIREDIS_PREFIX set, then build with "
    "the same HIREDIS_PREFIX; or set HIREDLOCK_NO_EXTENSIONS=1 to install the pure-Python "
    "package without the native engine."
)
HOW_TO_GET_A_COMPILER = (
    "Install a C compiler and the Python headers (Debian/Ubuntu: apt-get install build-essential "
    "python3-dev; Fedora/RHEL: dnf install gcc python3-devel; Alpine: apk add build-base "
    "python3-dev; macOS: xcode-select --install), or set HIREDLOCK_NO_EXTENSIONS=1 to install the "
    "pure-Python package without the native engine."
)

PROBE_PYTHON = "#include <Python.h>\nint main(void) { return 0; }\n"
PROBE_HIREDIS = """\
#include <hiredis/hiredis.h>
#if HIREDIS_MAJOR == 0 && HIREDIS_MINOR < 14
#error "hiredlock needs hiredis 0.14 or newer"
#endif
int main(void) {
    redisContext *c = redisConnectNonBlock("127.0.0.1", 1);
    if (c != 0) redisFree(c);
    return 0;
}
"""


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def _fail(reason: str, how: str = "") -> None:
    if not how:
        how = HOW_TO_GET_HIREDIS_WINDOWS if sys.platform == "win32" else HOW_TO_GET_HIREDIS
    raise SystemExit(f"\nhiredlock: cannot build the native engine: {reason}\n{how}\n")


def _hide_hiredis_flags() -> list[str]:
    """Linker flags that keep the symbols of a static libhiredis out of the extension's exports."""
    if sys.platform.startswith("linux") or sys.platform.startswith("freebsd"):
        return ["-Wl,--exclude-libs,ALL"]
    if sys.platform == "darwin":
        return ["-Wl,-exported_symbol,_PyInit__native"]
    return []


def _hiredis_from_prefix(prefix: str) -> tuple[dict[str, list[str]], str]:
    include = os.path.join(prefix, "include")
    if not os.path.isfile(os.path.join(include, "hiredis", "hiredis.h")):
        _fail(f"HIREDIS_PREFIX={prefix} has no include/hiredis/hiredis.h.")
    libdirs = [os.path.join(prefix, d) for d in ("lib", "lib64")]
    if sys.platform == "win32":  # tools/build_hiredis.ps1: CMake's static hiredis.lib
        for libdir in libdirs:
            static = os.path.join(libdir, "hiredis.lib")
            if os.path.isfile(static):
                return {
                    "include_dirs": [include],
                    "extra_objects": [static],
                    "libraries": ["ws2_32", "crypt32"],
                }, f"static {static}"
        _fail(f"HIREDIS_PREFIX={prefix} has no lib/hiredis.lib.", HOW_TO_GET_HIREDIS_WINDOWS)
    for libdir in libdirs:
        static = os.path.join(libdir, "libhiredis.a")
        if os.path.isfile(static):
            return {
                "include_dirs": [include],
                "extra_objects": [static],
                "extra_link_args": _hide_hiredis_flags(),
            }, f"static {static}"
    for libdir in libdirs:
        if glob.glob(os.path.join(libdir, "libhiredis.so*")) or glob.glob(
            os.path.join(libdir, "libhiredis*.dylib")
        ):
            return {
                "include_dirs": [include],
                "library_dirs": [libdir],
                "libraries": ["hiredis"],
                "runtime_library_dirs": [libdir],
            }, f"shared libhiredis in {libdir} (no libhiredis.a there)"
    _fail(f"HIREDIS_PREFIX={prefix} has no lib/libhiredis.a nor a shared libhiredis.")
    raise AssertionError  # unreachable


def _hiredis_from_pkg_config() -> tuple[dict[str, list[str]], str]:
    try:
        out = subprocess.run(
            ["pkg-config", "--cflags", "--libs", "hiredis"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    except FileNotFoundError:
        return {"libraries": ["hiredis"]}, "-lhiredis (pkg-config is not installed)"
    except subprocess.CalledProcessError as exc:
        detail = (exc.stderr or "").strip().splitlines()
        why = detail[0] if detail else "unknown package"
        return {"libraries": ["hiredis"]}, f"-lhiredis (pkg-config: {why})"
    flags: dict[str, list[str]] = {
        "include_dirs": [],
        "library_dirs": [],
        "libraries": [],
        "extra_compile_args": [],
        "extra_link_args": [],
    }
    for token in shlex.split(out):
        if token.startswith("-I"):
            flags["include_dirs"].append(token[2:])
        elif token.startswith("-L"):
            flags["library_dirs"].append(token[2:])
        elif token.startswith("-l"):
            flags["libraries"].append(token[2:])
        elif token.startswith("-D"):
            flags["extra_compile_args"].append(token)
        else:
            flags["extra_link_args"].append(token)
    return flags, "pkg-config hiredis"


class BuildExt(build_ext):
    """Translates the Cython source, checks that hiredis can be compiled and linked against,
    then builds; every failure ends the build with a message that says what to install."""

    def run(self) -> None:
        if self.extensions:
            self.extensions = self._prepare(self.extensions)
        super().run()

    def _prepare(self, extensions: list[Extension]) -> list[Extension]:
        prefix = os.environ.get("HIREDIS_PREFIX", "").strip()
        if sys.platform == "win32" and not prefix:
            _fail(
                "on Windows, hiredis is linked from HIREDIS_PREFIX only.",
                HOW_TO_GET_HIREDIS_WINDOWS,
            )
        flags, self._hiredis_source = (
            _hiredis_from_prefix(os.path.abspath(prefix)) if prefix else _hiredis_from_pkg_config()
        )
        try:
            from Cython.Build import cythonize
        except ImportError:
            _fail(
                "Cython 3 is not installed in the build environment.",
                "pip installs it by itself (it is in pyproject.toml's build requirements); with "
                "--no-build-isolation install it first: pip install 'Cython>=3'.",
            )
        for ext in extensions:
            # setuptools rewrites .pyx to .c when Cython was missing at import: use the source.
            ext.sources = [PYX_SOURCE]
            # The C file is generated into the build directory: _native/'s own headers (included
            # with quotes) must still be found.
            ext.include_dirs.insert(0, os.path.dirname(PYX_SOURCE))
            for key, values in flags.items():
                getattr(ext, key).extend(values)
        print(f"hiredlock: native engine against {self._hiredis_source}", file=sys.stderr)
        try:
            translated = cythonize(
                extensions,
                build_dir=os.path.join(self.build_temp, "cython"),
                # src/hiredlock/_native.pxd: where Cython finds the module's .pxd, which includes
                # _native/engine.pxd
                include_path=[PXD_ROOT],
                compiler_directives={"language_level": "3"},
                quiet=True,
            )
        except Exception as exc:  # Cython's CompileError: the .pyx itself is broken
            _fail(f"Cython could not translate {PYX_SOURCE}: {exc}", "This is a bug in hiredlock.")
            raise
        # cythonize() returns copies; keep setuptools' own Extension objects (finalized already).
        for ext, done in zip(extensions, translated):
            ext.sources = done.sources
        return extensions

    def build_extension(self, ext: Extension) -> None:
        if self.compiler.compiler_type != "msvc":
            # Only PyInit__native is exported (Python marks it visible itself).
            ext.extra_compile_args += ["-O2", "-fvisibility=hidden"]
        self._probe(ext)
        try:
            super().build_extension(ext)
        except (CompileError, LinkError, ExecError) as exc:
            _fail(
                f"compiling or linking {ext.name} against {self._hiredis_source} failed ({exc}); "
                "the compiler's own message is above."
            )

    def _probe(self, ext: Extension) -> None:
        """Compile and link tiny programs first, so that a missing compiler, Python header or
        hiredis is reported as such instead of as a raw compiler error in the middle of Cython's
        output."""
        with tempfile.TemporaryDirectory(prefix="hiredlock-probe-") as tmp:
            src = os.path.join(tmp, "python_probe.c")
            with open(src, "w") as f:
                f.write(PROBE_PYTHON)
            try:
                self.compiler.compile([src], output_dir=tmp)
            except (CompileError, ExecError) as exc:
                _fail(
                    f"a C compiler with the Python headers is not available ({exc}).",
                    HOW_TO_GET_A_COMPILER,
                )
            src = os.path.join(tmp, "hiredis_probe.c")
            with open(src, "w") as f:
                f.write(PROBE_HIREDIS)
            try:
                objects = self.compiler.compile(
                    [src],
                    output_dir=tmp,
                    include_dirs=ext.include_dirs,
                    extra_postargs=ext.extra_compile_args,
                )
            except (CompileError, ExecError):
                _fail(
                    f"the hiredis headers (hiredis/hiredis.h, 0.14 or newer) were not found "
                    f"or are too old (hiredis from: {self._hiredis_source})."
                )
            try:
                self.compiler.link_executable(
                    objects + list(ext.extra_objects or []),
                    "hiredis_probe",
                    output_dir=tmp,
                    libraries=ext.libraries,
                    library_dirs=ext.library_dirs,
                    runtime_library_dirs=ext.runtime_library_dirs,
                )
            except (LinkError, ExecError):
                _fail(
                    f"the hiredis headers were found but linking against {self._hiredis_source} "
                    "failed (is the library itself installed?)."
                )


def _extensions() -> list[Extension]:
    if _flag("HIREDLOCK_NO_EXTENSIONS"):
        if _flag("HIREDLOCK_REQUIRE_EXTENSIONS"):
            sys.exit(
                "hiredlock: HIREDLOCK_NO_EXTENSIONS=1 and HIREDLOCK_REQUIRE_EXTENSIONS=1 "
                "contradict each other: unset one."
            )
        print("hiredlock: HIREDLOCK_NO_EXTENSIONS=1: pure-Python package only", file=sys.stderr)
        return []
    # Flags are filled in by BuildExt, so that an sdist can be made without hiredis or Cython.
    return [Extension("hiredlock._native", sources=[PYX_SOURCE])]


setup(ext_modules=_extensions(), cmdclass={"build_ext": BuildExt})
