"""The layers stay visible in the tree (DESIGN.md, sections 2-3): the algorithm in hiredlock._core
imports no engine (the engine contract's types aside), no asyncio layer and no sync-only part; no
import cycle between modules at import time; no module grows past the size a reader can hold.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import hiredlock

PACKAGE = Path(hiredlock.__file__).parent
# What hiredlock._core may import from the rest of the package.
CORE_MAY_IMPORT = {"hiredlock._engines.contract"}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str, path: Path, *, top_level_only: bool) -> set[str]:
    """The hiredlock modules `path` imports (at import time only, when top_level_only: imports
    inside functions and under TYPE_CHECKING run later, or never)."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    for node in nodes:
        if isinstance(node, ast.If) and top_level_only:
            continue  # (if TYPE_CHECKING: ...)
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("hiredlock"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("hiredlock"):
                continue
            known = modules()
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                found.add(submodule if submodule in known else target)
    return found


def test_the_algorithm_imports_no_engine_and_no_api():
    wrong = {}
    for name, path in modules().items():
        if not name.startswith("hiredlock._core"):
            continue
        bad = {
            imported
            for imported in imports_of(name, path, top_level_only=False)
            if not imported.startswith("hiredlock._core")
            and imported not in CORE_MAY_IMPORT
            and imported != "hiredlock"
        }
        if bad:
            wrong[name] = sorted(bad)
    assert not wrong, wrong


def test_no_import_cycle():
    graph = {
        name: {m for m in imports_of(name, path, top_level_only=True) if m != name}
        for name, path in modules().items()
    }
    # a package's __init__ importing its own modules is how a package is made, not a cycle
    cycles = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt.startswith(node + "."):
                continue
            if state.get(nxt) == 1 and not node.startswith(nxt + "."):
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not cycles, cycles[:3]


def test_the_docs_layout_is_the_tree():
    """The Layout block of docs/internals/layout.md is generated from the modules' docstrings
    (tools/layout.py --write)."""
    root = PACKAGE.parent.parent
    if not (root / "tools" / "layout.py").exists():
        pytest.skip("an installed package: the source tree is not here")
    result = subprocess.run(
        [sys.executable, str(root / "tools" / "layout.py")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.strip() in (root / "docs" / "internals" / "layout.md").read_text(), (
        "docs/internals/layout.md is out of date: run python tools/layout.py --write"
    )


MAX_MODULE_LINES = 600
MAX_NATIVE_PART_LINES = 800


@pytest.mark.parametrize("name", sorted(modules()))
def test_module_size(name):
    lines = modules()[name].read_text().count("\n")
    assert lines <= MAX_MODULE_LINES, f"{name}: {lines} lines, split it by subject"


def test_native_part_sizes():
    native = PACKAGE.parent.parent / "_native"
    if not native.is_dir():
        pytest.skip("an installed package: the source tree is not here")
    parts = sorted(path for pattern in ("*.pyx", "*.pxd", "*.pxi") for path in native.glob(pattern))
    assert parts, "no native sources found"
    too_long = {
        p.name: n for p in parts if (n := p.read_text().count("\n")) > MAX_NATIVE_PART_LINES
    }
    assert not too_long, too_long
