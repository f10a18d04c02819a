"""What the demo shows: a header, a live bar per round with a line under it, a final table.
Drawn with rich (the cli extra); fits an 80-column terminal."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Optional

from rich import box
from rich.console import Console, Group
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from .race import HIREDLOCK, NAIVE, NO_LOCK
from .rounds import Progress, Result

BAR_WIDTH = 40


class RoundView:
    """The live part of one round: a bar, the count, the time, and a line saying what happens."""

    def __init__(self, console: Console, mode: str, tickets: int, ttl: float) -> None:
        self.mode = mode
        self.tickets = tickets
        self.ttl = ttl
        self.progress = Progress(0, 0.0, None, 0.0)
        self.finished = False
        self.console = console
        self.live: Optional[Live] = None
        if console.is_terminal:  # elsewhere (a pipe, a CI log) the last state is printed once
            self.live = Live(console=console, refresh_per_second=12, get_renderable=self._render)

    def __enter__(self) -> RoundView:
        if self.live is not None:
            self.live.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.finished = True  # the verdict printed next says the rest: no status line
        if self.live is not None:
            self.live.refresh()
            self.live.stop()
        else:
            self.console.print(self._render())

    def show(self, progress: Progress) -> None:
        self.progress = progress

    def _render(self) -> Group:
        p = self.progress
        over = p.sold > self.tickets
        bar = ProgressBar(
            total=self.tickets,
            completed=min(p.sold, self.tickets),
            width=BAR_WIDTH,
            complete_style="red" if over else "yellow" if p.killed else "cyan",
            finished_style="red" if over else "green",
        )
        count = Text(f"{p.sold:>5}/{self.tickets} sold", style="bold red" if over else "bold")
        row = Table.grid(padding=(0, 1))
        row.add_row(Text(" "), bar, count, Text(f"{p.seconds:5.2f} s", style="dim"))
        if self.finished:
            return Group(row)
        return Group(row, Text("  " + self._line(p), style="dim"))

    def _line(self, p: Progress) -> str:
        if p.seconds == 0 and p.sold == 0:
            return "starting the sellers..."
        if p.killed is None:
            return "selling..."
        who = f"seller {p.killed} killed holding the lock"
        if self.mode == NAIVE:
            return f"{who}: no sale for {p.waiting:.1f} s"
        if p.waiting > 0.1:
            return f"{who}: waiting {p.waiting:.1f} s for its ttl ({self.ttl:g} s)"
        return f"{who}: its lock expired, selling again"


class DemoView:
    def __init__(self, console: Console) -> None:
        self.console = console

    def header(self, lines: Sequence[str]) -> None:
        self.console.print(Text("hiredlock demo: the ticket race", style="bold"))
        for paragraph in lines:
            for line in self._wrap(paragraph, 2):
                self.console.print(Text("  " + line))

    def round_title(self, number: int, title: str) -> None:
        self.console.print()
        self.console.print(Text.assemble((f"Round {number}", "bold"), "  ", title))

    def verdict(self, good: bool, text: str) -> None:
        mark, style = ("✓", "green") if good else ("✗", "red")
        for number, line in enumerate(self._wrap(text, 4)):
            lead = Text(f"  {mark} " if number == 0 else "    ", style=f"bold {style}")
            self.console.print(lead + Text(line, style=style))

    def _wrap(self, text: str, indent: int) -> list[str]:
        """Our own wrapping: indented lines without trailing blanks, also in logs."""
        return textwrap.wrap(text, width=min(self.console.width, 80) - indent - 1)

    def table(self, results: Sequence[tuple[str, Result]], tickets: int) -> None:
        table = Table(box=box.SIMPLE_HEAD, header_style="bold", show_edge=False, pad_edge=False)
        table.add_column("round", no_wrap=True)
        for name in ("sold", "oversold", "unsold", "seconds", "sales/s"):
            table.add_column(name, justify="right")
        table.add_column("result")
        for label, r in results:
            oversold = max(0, r.sold - tickets)
            unsold = max(0, tickets - r.sold)
            rate = "-" if r.rate is None else f"{r.rate:.0f}"
            if r.stalled:
                verdict = Text("stalled", style="bold red")
            elif oversold:
                verdict = Text("oversold", style="bold red")
            elif r.sold == tickets:
                verdict = Text("exact", style="bold green")
            else:
                verdict = Text("short", style="bold red")
            table.add_row(
                label,
                str(r.sold),
                str(oversold),
                str(unsold),
                f"{r.seconds:.2f}",
                rate,
                verdict,
            )
        self.console.print()
        self.console.print(table)


TITLES = {NO_LOCK: "no lock", NAIVE: "naive SETNX lock", HIREDLOCK: "hiredlock"}
