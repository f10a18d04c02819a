"""Build script: the pure-Python package, the native engine (the extension hiredlock._native), and
the modules of the lock's hot path compiled from their own .py files.

The compiled modules (the list is hiredlock/_compiled.py's COMPILED) are translated by Cython in
pure-Python mode (annotations are not taken as C types), with the .pxd beside some of them
declaring their classes as extension types; the same .py files run uncompiled where they are left
out. HIREDLOCK_NO_COMPILE=1 leaves them out (the native engine is still built). Each build writes
the digest of their sources beside the package (hiredlock/_compiled.json), so that an edited .py
is never shadowed by its stale compiled twin: `import hiredlock` refuses one.

The native engine links libhiredis (0.14 or newer):

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
builds the pure-Python package on purpose (no native engine, nothing compiled).
HIREDLOCK_REQUIRE_EXTENSIONS=1 (cibuildwheel and CI set it) spells out that default; with
HIREDLOCK_NO_EXTENSIONS=1 as well it is an error.

The Cython source is translated into the build directory: no generated .c lands in the tree, the
sdist or the wheel.
"""

from __future__ import annotations

import glob
import json
import os
import runpy
import shlex
import subprocess
import sys
import tempfile
from types import SimpleNamespace
from typing import Any

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
NATIVE = "hiredlock._native"


# hiredlock/_compiled.py run from its file (importing it would import the package): its
# names, COMPILED, MANIFEST and source_digests among them
COMPILED_LIST = SimpleNamespace(
    **runpy.run_path(
        os.path.join(os.path.dirname(os.path.abspath(__file__)), "src/hiredlock/_compiled.py")
    )
)
# Pure-Python mode: annotations stay annotations (a `-> bool` must not make a C int), and the
# extension types are not picklable (a lock object never was usefully).
COMPILED_DIRECTIVES = {"language_level": "3", "annotation_typing": False, "auto_pickle": False}


def _module_source(name: str) -> str:
    return os.path.join(PXD_ROOT, *name.split(".")) + ".py"


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
    """Translates the Cython sources (the native engine's, and the modules compiled from their
    .py), checks that hiredis can be compiled and linked against, then builds; every failure ends
    the build with a message that says what to install."""

    def finalize_options(self) -> None:
        super().finalize_options()
        self._hiredis_includes: list[str] = []  # (set by _prepare, from hiredis' flags)
        if not self.parallel:  # (unless -j says otherwise: one compiler per CPU)
            self.parallel = True

    def run(self) -> None:
        native = [ext for ext in self.extensions if ext.name == NATIVE]
        compiled = [ext for ext in self.extensions if ext.name != NATIVE]
        if native:
            native = self._prepare(native)
        if compiled:
            compiled = self._translate_compiled(compiled)
        self.extensions = native + compiled
        super().run()
        self._write_manifest([ext.name for ext in compiled])

    def _translate_compiled(self, extensions: list[Extension]) -> list[Extension]:
        """The modules compiled from their .py (and .pxd), translated into the build directory.
        They are compiled with the native engine's headers (_native/'s own, and hiredis'): a
        module that cimports its types (blocking.pxd, to call its methods in C), or cimports one
        that does, includes them."""
        cythonize = _cythonize_function()
        for ext in extensions:
            ext.sources = [_module_source(ext.name)]
            ext.include_dirs[:0] = [os.path.dirname(PYX_SOURCE), *self._hiredis_includes]
        try:
            translated = cythonize(
                extensions,
                build_dir=os.path.join(self.build_temp, "cython"),
                # (a .pxd cimports another by its module's name; the engine's .pxd cimports
                # _native/libhiredis.pxd)
                include_path=[PXD_ROOT, os.path.dirname(PYX_SOURCE)],
                compiler_directives=COMPILED_DIRECTIVES,
                quiet=True,
            )
        except Exception as exc:  # Cython's CompileError: a .py or .pxd it cannot translate
            raise SystemExit(
                f"\nhiredlock: Cython could not translate the modules compiled from their .py "
                f"({exc}). A bug in hiredlock; HIREDLOCK_NO_COMPILE=1 builds without them.\n"
            ) from exc
        for ext, done in zip(extensions, translated):
            ext.sources = done.sources
        return extensions

    def _write_manifest(self, compiled: list[str]) -> None:
        """Writes what this build compiled, with the digest of its sources, beside the package
        (in the build directory, and in the tree too when building in place: an editable
        install), and removes any compiled module left there by an earlier build that compiled
        more (Python would import it instead of its .py)."""
        built = {name: COMPILED_LIST.source_digests(_module_source(name)) for name in compiled}
        places = [self.build_lib]
        if self.inplace:
            build_py = self.get_finalized_command("build_py")
            places.append(os.path.dirname(build_py.get_package_dir("hiredlock")))
        for root in places:
            package = os.path.join(root, "hiredlock")
            os.makedirs(package, exist_ok=True)
            with open(os.path.join(package, COMPILED_LIST.MANIFEST), "w") as f:
                json.dump(built, f, indent=1, sort_keys=True)
            for name in COMPILED_LIST.COMPILED:
                if name in built:
                    continue
                left = os.path.join(root, self.get_ext_filename(name))
                if os.path.exists(left):
                    print(f"hiredlock: removing {left} (not compiled by this build)")
                    os.remove(left)

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
        self._hiredis_includes = list(flags.get("include_dirs", []))
        cythonize = _cythonize_function()
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
            # Only the module's PyInit_ function is exported (Python marks it visible itself).
            ext.extra_compile_args += ["-O2", "-fvisibility=hidden"]
        if ext.name != NATIVE:
            super().build_extension(ext)  # (no hiredis: a compiler failure says what it is)
            return
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


def _cythonize_function() -> Any:
    try:
        from Cython.Build import cythonize
    except ImportError:
        _fail(
            "Cython 3 is not installed in the build environment.",
            "pip installs it by itself (it is in pyproject.toml's build requirements); with "
            "--no-build-isolation install it first: pip install 'Cython>=3.1'.",
        )
    return cythonize


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
    # (the C headers beside the .pyx: an edit of one rebuilds the engine, as an edit of a .pxi does)
    headers = sorted(glob.glob(os.path.join(os.path.dirname(PYX_SOURCE), "*.h")))
    extensions = [Extension(NATIVE, sources=[PYX_SOURCE], depends=headers)]
    if _flag("HIREDLOCK_NO_COMPILE"):
        print("hiredlock: HIREDLOCK_NO_COMPILE=1: the hot path's modules stay .py", file=sys.stderr)
    else:
        extensions += [Extension(name, [_module_source(name)]) for name in COMPILED_LIST.COMPILED]
    return extensions


# hiredlock/_sync/blocking_steps.py, the direct form of a lock's steps, is derived from
# hiredlock/_core/lock_steps.py by tools/blocking_steps.py before any build (it is not in git):
# every install, compiled or not, has it, in step with the steps it comes from.
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "tools/blocking_steps.py"))[
    "write"
]()

setup(ext_modules=_extensions(), cmdclass={"build_ext": BuildExt})
