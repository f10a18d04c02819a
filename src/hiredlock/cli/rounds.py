"""One round of the ticket race: sellers started as processes, watched, and stopped by pid."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional

from .exits import FAILED, CliError
from .race import URL_KEYS, URLS_ENV, Keys

POLL = 0.05  # seconds between looks at the count
STALL = 2.0  # seconds without a sale, after a seller died holding the lock, that make a stall
READY_TIMEOUT = 60.0  # seconds the sellers get to start (imports, connections)
ROUND_LIMIT = 300.0  # seconds a round may take at most


@dataclass
class Result:
    mode: str
    sold: int
    seconds: float  # from the start signal to the last sale
    killed: Optional[int] = None  # which seller (1-based) was killed holding the lock
    killed_at: Optional[int] = None  # tickets sold when it was killed
    stalled: bool = False  # no sale for STALL seconds after the kill: stopped
    resumed_after: Optional[float] = None  # seconds from the kill to the next sale

    @property
    def rate(self) -> Optional[float]:
        """Sales per second while selling (not counting the wait after the kill)."""
        selling = self.seconds - (self.resumed_after or 0.0)
        return None if self.stalled or selling <= 0 else self.sold / selling


@dataclass
class Progress:
    sold: int
    seconds: float
    killed: Optional[int]
    waiting: float  # seconds since the kill without a sale (0 when selling)


class Round:
    """Runs `workers` sellers in `mode`; stop() kills what still runs (safe at any time)."""

    def __init__(
        self, mode: str, shop: Any, config: dict[str, Any], workers: int, tickets: int
    ) -> None:
        self.mode = mode
        self.shop = shop
        self.keys = Keys(config["prefix"])
        self.config = {**config, "mode": mode, "parent": os.getpid()}
        self.workers = workers
        self.tickets = tickets
        self.procs: list[subprocess.Popen[bytes]] = []

    def run(self, show: Callable[[Progress], None]) -> Result:
        self.shop.delete(*self.keys.shop_keys())
        self.shop.mset({self.keys.stock: self.tickets, self.keys.sold: 0})
        shown = {key: value for key, value in self.config.items() if key not in URL_KEYS}
        argv = [sys.executable, "-m", "hiredlock.cli.race", json.dumps(shown)]
        urls = {key: self.config[key] for key in URL_KEYS}
        environ = {**os.environ, URLS_ENV: json.dumps(urls)}
        for _ in range(self.workers):
            # Own session: a Ctrl-C on the terminal reaches only the demo, which stops the
            # sellers first and the servers last (the sellers die with the demo, see race.py).
            self.procs.append(
                subprocess.Popen(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    env=environ,
                    start_new_session=True,
                )
            )
        self._wait_ready(show)
        self.shop.rpush(self.keys.go, *["go"] * self.workers)
        return self._watch(time.monotonic(), show)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
        for proc in self.procs:
            proc.wait()
            if proc.stderr is not None:
                proc.stderr.close()

    def _wait_ready(self, show: Callable[[Progress], None]) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while self.shop.llen(self.keys.ready) < self.workers:
            self._check_exits()
            if time.monotonic() > deadline:
                raise CliError(f"the sellers did not start within {READY_TIMEOUT:g} s", FAILED)
            show(Progress(0, 0.0, None, 0.0))
            time.sleep(POLL)

    def _watch(self, start: float, show: Callable[[Progress], None]) -> Result:
        result = Result(self.mode, 0, 0.0)
        last_sale = killed_time = start
        while True:
            now = time.monotonic()
            sold = int(self.shop.get(self.keys.sold) or 0)
            if sold != result.sold:
                result.sold, last_sale = sold, now
                if result.killed is not None and result.resumed_after is None:
                    result.resumed_after = now - killed_time
            killed = self._check_exits()
            if killed is not None and result.killed is None:
                result.killed, result.killed_at, killed_time = killed, sold, now
            waiting = now - max(last_sale, killed_time) if result.killed else 0.0
            show(Progress(result.sold, now - start, result.killed, waiting))
            if all(proc.poll() is not None for proc in self.procs):
                break
            if result.killed is not None and waiting >= STALL:
                result.stalled = True
                break
            if now - start > ROUND_LIMIT:
                raise CliError(f"round {self.mode!r} took over {ROUND_LIMIT:g} s", FAILED)
            time.sleep(POLL)
        result.seconds = last_sale - start
        self.stop()
        return result

    def _check_exits(self) -> Optional[int]:
        """The seller (1-based) that was killed, if one was; CliError if one failed."""
        killed = None
        for number, proc in enumerate(self.procs, 1):
            code = proc.poll()
            if code == -signal.SIGKILL:
                killed = number
            elif code:
                error = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
                raise CliError(f"seller {number} failed (status {code}): {error}", FAILED)
        return killed
