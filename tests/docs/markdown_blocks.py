"""The fenced code blocks of README.md and docs/**/*.md, and how the suite runs them.

Every block names its language. `python` and `bash` blocks are code: the suite runs them, unless
the line before the block is an HTML comment `<!-- not-run: REASON -->` (a block that installs from
PyPI, needs TLS certificates, takes minutes...). Other languages (`text`, `toml`) are listings:
output, a crontab, a configuration file, which nothing could run.

The examples' addresses stay natural for a reader (`redis://10.0.0.1:6379/0`, ...): before a block
runs, `10.0.0.N:6379` becomes the address of the suite's N-th server (see `rewrite_addresses`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"
CODE_LANGUAGES = frozenset({"python", "bash"})
LISTING_LANGUAGES = frozenset({"text", "toml"})
NOT_RUN = re.compile(r"^\s*<!-- not-run: (?P<reason>\S.*?) -->\s*$")
FENCE = re.compile(r"^(?P<indent>\s*)```(?P<language>\S*)\s*$")
EXAMPLE_ADDRESS = re.compile(r"10\.0\.0\.(?P<index>[1-9]):6379")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    language: str
    code: str
    not_run: str | None  # the reason given, when the block is marked as not runnable

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.language in CODE_LANGUAGES and self.not_run is None


def pages() -> list[Path]:
    """README.md and every page of the docs site, in a stable order."""
    return [README, *sorted(DOCS.rglob("*.md"))]


def blocks(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").split("\n")
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent = len(opening.group("indent"))
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if end == len(lines):
            raise ValueError(f"{path}:{i + 1}: a code block that is never closed")
        code = "\n".join(line[indent:] for line in lines[i + 1 : end]) + "\n"
        marker = NOT_RUN.match(lines[i - 1]) if i else None
        found.append(
            Block(
                path=path,
                line=i + 1,
                language=opening.group("language"),
                code=code,
                not_run=marker.group("reason") if marker else None,
            )
        )
        i = end + 1
    return found


def rewrite_addresses(code: str, addresses: list[str]) -> str:
    """`10.0.0.N:6379` -> the N-th of `addresses` ("host:port"), N counted from 1."""

    def replace(match: re.Match[str]) -> str:
        index = int(match.group("index")) - 1
        if index >= len(addresses):
            raise ValueError(f"the example names 10.0.0.{index + 1}: only {len(addresses)} servers")
        return addresses[index]

    return EXAMPLE_ADDRESS.sub(replace, code)
