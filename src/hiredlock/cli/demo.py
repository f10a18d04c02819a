"""`hiredlock demo`: the ticket race, in three rounds, on local servers it starts itself.

Sellers (processes) sell one stock with a read-check-write sale (race.py). Round 1 has no lock
and oversells. Round 2 takes a naive lock (SETNX on the shop server: no token, no expiry) and a
seller is killed while holding it: everybody else waits for ever. Round 3 takes a hiredlock
lock, with the same crash: the dead seller's lock expires with its ttl, and exactly the stock is
sold. Without --masters, 5 masters and a shop server (which holds the stock) are started on free
loopback ports, and stopped, with their files removed, on every exit (Ctrl-C and SIGTERM too).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
from typing import Any, Optional

from .clients import redis_client
from .exits import FAILED, OK, UNREACHABLE, CliError, Interrupted
from .masters import failed_votes, master_urls, open_redlock
from .race import HIREDLOCK, NAIVE, NO_LOCK, RACE_SLEEP, Keys
from .rounds import STALL, Result, Round
from .servers import LocalServers, find_binary

TTL = 1.0  # seconds: the hiredlock lock's ttl in round 3 (how long a dead seller blocks)
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def command(options: argparse.Namespace) -> int:
    if options.masters:  # a bad URL is a usage error, whether rich is here or not (no I/O)
        open_redlock(*master_urls(options.masters)).close()
    try:
        from rich.console import Console
    except ImportError:
        raise CliError(
            "the demo draws with rich, which is not installed: pip install 'hiredlock[cli]' "
            "(`make demo` does it)",
            FAILED,
        ) from None
    from .demo_view import DemoView

    view = DemoView(Console(highlight=False))
    previous = {signum: signal.signal(signum, _interrupt) for signum in STOP_SIGNALS}
    demo = _Demo(options, view)
    try:
        return demo.play()
    except Interrupted as stop:
        name = signal.Signals(stop.signum).name
        view.console.print(f"\n{name}: stopping the sellers and the servers")
        return stop.status
    finally:
        for signum in STOP_SIGNALS:  # the cleanup runs to its end
            signal.signal(signum, signal.SIG_IGN)
        demo.cleanup()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _interrupt(signum: int, _frame: object) -> None:
    for other in STOP_SIGNALS:  # only the first one counts: a second must not cut the cleanup
        signal.signal(other, signal.SIG_IGN)
    raise Interrupted(signum)


class _Demo:
    def __init__(self, options: argparse.Namespace, view: Any) -> None:
        self.options = options
        self.view = view
        self.servers: Optional[LocalServers] = None
        self.round: Optional[Round] = None
        self.shop: Any = None
        self.keys = Keys(f"hiredlock-demo:{os.getpid()}:")

    def play(self) -> int:
        urls, shop_url, where = self._servers()
        engine, quorum = self._check(urls, shop_url)
        workers, tickets = self.options.workers, self.options.tickets
        self.view.header(
            [
                f"{workers} seller processes, {tickets} tickets. A sale reads the stock and, "
                f"if it is above 0, waits {RACE_SLEEP * 1000:g} ms and writes stock - 1: two "
                "sellers that read the same stock sell the same ticket.",
                where,
            ]
        )
        config = {
            "prefix": self.keys.prefix,
            "shop": shop_url,
            "masters": urls,
            "engine": engine,
            "ttl": TTL,
            "crash_at": None,
        }
        first = self._no_lock(config)
        crash = {**config, "crash_at": tickets - tickets // 3}  # the stock read when killed
        second = self._naive_lock(crash)
        native = "native engine (libhiredis)" if engine == "native" else f"{engine} engine"
        self.view.round_title(
            3, f"hiredlock: {len(urls)} masters, quorum {quorum}, ttl {TTL:g} s, {native}"
        )
        third = self._play(HIREDLOCK, crash)
        exact = third.sold == tickets
        text = f"sold {third.sold} of {tickets}, none oversold"
        if third.rate is not None:
            text += f", {third.rate:.0f} sales/s with the {engine} engine"
        if not exact:
            text = f"sold {third.sold} of {tickets}: not the stock"
        elif third.killed is not None and third.resumed_after is not None:
            text += (
                f". Seller {third.killed} was killed holding the lock: it expired with its ttl "
                f"and the others went on {third.resumed_after:.1f} s later."
            )
        self.view.verdict(exact, text)
        rows = [("1 no lock", first), ("2 naive SETNX lock", second)]
        self.view.table([*rows, (f"3 hiredlock ({engine})", third)], tickets)
        return OK if exact else FAILED

    def _servers(self) -> tuple[list[str], str, str]:
        """The masters' URLs, the shop's URL, and a sentence saying where they run."""
        if self.options.masters:
            urls, _source = master_urls(self.options.masters)
            return (
                urls,
                urls[0],
                f"Servers: {len(urls)} masters (--masters); the stock is on the first.",
            )
        binary = find_binary()
        self.servers = LocalServers(binary, 6, prefix="hiredlock-demo-")
        started = self.servers.start()
        ports = " ".join(url.split(":")[2].split("/")[0] for url in started)
        where = (
            f"Servers: {binary}, 5 masters and a shop (it holds the stock), on 127.0.0.1 ports "
            f"{ports}."
        )
        return started[:5], started[5], where

    def _check(self, urls: list[str], shop_url: str) -> tuple[str, int]:
        """The engine's name and the quorum, once a quorum of masters and the shop answer."""
        import redis

        source = "--masters" if self.options.masters else "local servers"
        redlock = open_redlock(urls, source, backend=self.options.engine)
        try:
            engine, quorum = redlock.backend, redlock.quorum
            states = redlock.inspect(self.keys.lock)
        finally:
            redlock.close()
        if sum(1 for state in states if state.exists is not None) < quorum:
            raise CliError(f"masters unreachable: {_failures(states)}", UNREACHABLE)
        self.shop = redis_client(shop_url, socket_timeout=10)
        try:
            self.shop.ping()
        except redis.RedisError as exc:
            raise CliError(
                f"the shop server {shop_url} does not answer: {exc}", UNREACHABLE
            ) from None
        return engine, quorum

    def _no_lock(self, config: dict[str, Any]) -> Result:
        tickets = self.options.tickets
        self.view.round_title(1, "no lock")
        result = self._play(NO_LOCK, config)
        over = result.sold - tickets
        if over > 0:
            self.view.verdict(
                False,
                f"sold {result.sold} of {tickets}: oversold by {over} (sellers read the same "
                "stock and sold the same ticket)",
            )
        else:
            self.view.verdict(True, f"sold {result.sold}: no oversell this time (more --workers?)")
        return result

    def _naive_lock(self, config: dict[str, Any]) -> Result:
        tickets, workers = self.options.tickets, self.options.workers
        self.view.round_title(2, "a naive lock: SETNX, no token, no expiry; a seller dies")
        result = self._play(NAIVE, config)
        if result.stalled:
            pttl = self.shop.pttl(self.keys.naive_lock)
            self.view.verdict(
                False,
                f"stalled at {result.sold}/{tickets}: seller {result.killed} was killed holding "
                f"the lock, which has no expiry (PTTL {pttl}): the other {workers - 1} sellers "
                f"wait for ever (stopped after {STALL:g} s without a sale)",
            )
        else:
            self.view.verdict(True, f"sold {result.sold} of {tickets}: no stall this time")
        return result

    def _play(self, mode: str, config: dict[str, Any]) -> Result:
        from .demo_view import RoundView

        self.round = Round(mode, self.shop, config, self.options.workers, self.options.tickets)
        try:
            with RoundView(self.view.console, mode, self.options.tickets, TTL) as live:
                return self.round.run(live.show)
        finally:
            self.round.stop()

    def cleanup(self) -> None:
        if self.round is not None:
            self.round.stop()
        if self.shop is not None:
            if self.servers is None:  # the user's servers: leave nothing of ours there
                with contextlib.suppress(Exception):
                    self.shop.delete(*self.keys.shop_keys())
            self.shop.close()
        if self.servers is not None:
            self.servers.stop()


def _failures(states: Any) -> str:
    from hiredlock import Vote

    return failed_votes([Vote(state.master, state.outcome, state.detail) for state in states])
