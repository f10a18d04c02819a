"""Tables on the terminal: drawn with rich when it is installed and stdout is a terminal, else
plain aligned text (also what scripts and pipes get)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from rich.console import Console


def say(message: str) -> None:
    """One line on stderr, as the command reports errors and warnings. Passwords are redacted:
    a message may quote what the user gave (a URL, an unrecognised argument)."""
    from hiredlock._core.redaction import redact

    print(f"hiredlock: {redact(message)}", file=sys.stderr, flush=True)


def rich_console() -> Optional[Console]:
    """A rich Console for stdout, or None when rich is missing or stdout is not a terminal."""
    if not sys.stdout.isatty():
        return None
    try:
        from rich.console import Console
    except ImportError:
        return None
    return Console()


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[int] = ()) -> None:
    """Prints rows under headers; columns whose index is in `right` are right-aligned."""
    console = rich_console()
    if console is not None:
        from rich.table import Table

        drawn = Table(box=None, header_style="bold", pad_edge=False)
        for index, header in enumerate(headers):
            drawn.add_column(header, justify="right" if index in right else "left")
        for row in rows:
            drawn.add_row(*row)
        console.print(drawn)
        return
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows)]
    for row in (headers, *rows):
        cells = [
            str(cell).rjust(width) if index in right else str(cell).ljust(width)
            for index, (cell, width) in enumerate(zip(row, widths))
        ]
        print("  ".join(cells).rstrip())
