"""The modules compiled from their own .py (hiredlock/_compiled.py): each .pxd says what its .py
says, the build compiled what it should (HIREDLOCK_EXPECT_COMPILED=1 / 0 says which mode this run
is), and `import hiredlock` refuses a compiled module that is stale.
"""

from __future__ import annotations

import ast
import json
import os
import re
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

import pytest

import hiredlock
from hiredlock import _compiled

PACKAGE = Path(hiredlock.__file__).parent


def augmenting_pxds() -> list[Path]:
    """The .pxd files beside a .py (the native engine's _native.pxd has no .py)."""
    return sorted(p for p in PACKAGE.rglob("*.pxd") if p.with_suffix(".py").exists())


def pxd_fields(pxd: Path) -> dict[str, set[str]]:
    """{cdef class: the names of its fields} as the .pxd declares them."""
    classes: dict[str, set[str]] = {}
    current = None
    for line in pxd.read_text().splitlines():
        if match := re.match(r"cdef class (\w+)", line):
            current = classes.setdefault(match.group(1), set())
        elif current is not None and (
            # (a type of one word or more: object, a class, long long)
            match := re.match(r"    cdef (?:public )?(?:[\w.]+ )+(\w+)\s*(#.*)?$", line)
        ):
            current.add(match.group(1))
    return classes


def py_slots(py: Path) -> dict[str, set[str]]:
    slots = {}
    for node in ast.parse(py.read_text()).body:
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.Assign) and any(
                    isinstance(t, ast.Name) and t.id == "__slots__" for t in item.targets
                ):
                    slots[node.name] = set(ast.literal_eval(item.value))
    return slots


def test_each_pxd_declares_the_slots_of_its_classes():
    pxds = augmenting_pxds()
    if not pxds:
        pytest.skip("an installed package: the .pxd files are for the build only")
    for pxd in pxds:
        slots = py_slots(pxd.with_suffix(".py"))
        for name, fields in pxd_fields(pxd).items():
            assert name in slots, f"{pxd.name}: {name} has no __slots__ in its .py"
            assert fields == slots[name], (
                f"{pxd.name}: {name}'s fields differ from its __slots__: "
                f"only in the .pxd {sorted(fields - slots[name])}, "
                f"only in the .py {sorted(slots[name] - fields)}"
            )


def test_each_pxd_is_of_a_compiled_module():
    root = PACKAGE.parent
    for pxd in augmenting_pxds():
        module = ".".join(pxd.relative_to(root).with_suffix("").parts)
        assert module in _compiled.COMPILED, f"{pxd} is of a module that is not compiled"


@pytest.mark.skipif(
    os.environ.get("HIREDLOCK_EXPECT_COMPILED") not in ("0", "1"),
    reason="HIREDLOCK_EXPECT_COMPILED=1 (or 0) says whether this run's package is compiled",
)
def test_the_build_mode_is_the_one_expected():
    for name in _compiled.COMPILED:
        __import__(name)
    expected = list(_compiled.COMPILED) if os.environ["HIREDLOCK_EXPECT_COMPILED"] == "1" else []
    assert _compiled.compiled_modules() == expected


# -- the guard against a stale compiled module ---------------------------------------------------


def fake_package(tmp_path: Path, source: str = "x = 1\n") -> tuple[Path, Path, Path]:
    """A package dir with one module and a file named as its compiled twin."""
    package = tmp_path / "hiredlock"
    (package / "_core").mkdir(parents=True)
    py = package / "_core" / "mod.py"
    py.write_text(source)
    compiled = package / "_core" / f"mod{EXTENSION_SUFFIXES[0]}"
    compiled.write_bytes(b"")
    return package, py, compiled


def write_manifest(package: Path, py: Path) -> None:
    digests = _compiled.source_digests(str(py))
    (package / _compiled.MANIFEST).write_text(json.dumps({"hiredlock._core.mod": digests}))


def test_a_compiled_module_of_the_current_source_is_accepted(tmp_path):
    package, py, _ = fake_package(tmp_path)
    write_manifest(package, py)
    _compiled.check(str(package))


def test_a_compiled_module_of_an_edited_source_is_refused(tmp_path):
    package, py, compiled = fake_package(tmp_path)
    write_manifest(package, py)
    py.write_text("x = 2\n")
    with pytest.raises(ImportError, match="compiled from an earlier version") as error:
        _compiled.check(str(package))
    assert str(compiled) in str(error.value)


def test_an_edited_pxd_makes_the_compiled_module_stale(tmp_path):
    package, py, _ = fake_package(tmp_path)
    pxd = py.with_suffix(".pxd")
    pxd.write_text("cdef class A:\n    pass\n")
    write_manifest(package, py)
    _compiled.check(str(package))
    pxd.write_text("cdef class A:\n    cdef object b\n")
    with pytest.raises(ImportError, match=r"earlier version of .*mod\.pxd"):
        _compiled.check(str(package))
    pxd.unlink()  # (an installed wheel has no .pxd: the .py is compared alone)
    _compiled.check(str(package))


def test_a_compiled_module_the_last_build_did_not_make_is_refused(tmp_path):
    package, _, _ = fake_package(tmp_path)
    (package / _compiled.MANIFEST).write_text("{}")  # (a build with HIREDLOCK_NO_COMPILE=1)
    with pytest.raises(ImportError, match="not made by the last build"):
        _compiled.check(str(package))
    (package / _compiled.MANIFEST).unlink()  # (no build wrote one: HIREDLOCK_NO_EXTENSIONS=1)
    with pytest.raises(ImportError, match="not made by the last build"):
        _compiled.check(str(package))


def test_an_extension_without_a_py_is_not_looked_at(tmp_path):
    package = tmp_path / "hiredlock"
    package.mkdir()
    (package / f"_native{EXTENSION_SUFFIXES[0]}").write_bytes(b"")
    (package / "_native.pyi").write_text("")
    _compiled.check(str(package))


def test_this_package_passed_its_own_check():
    # (`import hiredlock` ran it; here once more, on the package as it is now)
    _compiled.check(str(PACKAGE))
    assert "hiredlock._compiled" in sys.modules
