"""`hiredlock servers`: local masters for development, running until Ctrl-C (or SIGTERM/SIGHUP)."""

from __future__ import annotations

import argparse
import signal
import sys

from .exits import OK, Interrupted
from .masters import ENV_VAR
from .servers import LocalServers, find_binary

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
WATCH_INTERVAL = 1.0  # seconds between checks that the servers still run


def command(options: argparse.Namespace) -> int:
    binary = find_binary()
    # Until the servers are up and printed, a signal stops everything through Interrupted;
    # afterwards signals are only waited for, so the stop is always the same orderly path.
    previous = {signum: signal.signal(signum, _interrupt) for signum in STOP_SIGNALS}
    servers = LocalServers(binary, options.count, prefix="hiredlock-servers-")
    try:
        urls = servers.start()
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        joined = ",".join(urls)
        print(f"{len(urls)} local masters: {binary}, files in {servers.dir}")
        for url in urls:
            print(f"  {url}")
        print(f"export {ENV_VAR}={joined}")
        print(f"(or --masters {joined})")
        print("Ctrl-C stops them and removes their files.", flush=True)
        signum = _wait(servers)
        print(f"{signal.Signals(signum).name}: stopping {len(urls)} masters", file=sys.stderr)
        return OK
    except Interrupted as stop:
        print(f"{signal.Signals(stop.signum).name}: stopping the masters", file=sys.stderr)
        return stop.status
    finally:
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)  # the cleanup runs to its end
        servers.stop()
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _interrupt(signum: int, _frame: object) -> None:
    raise Interrupted(signum)


def _wait(servers: LocalServers) -> int:
    """Waits for a stop signal, saying so once when a master exits meanwhile."""
    reported: set[int] = set()
    while True:
        info = signal.sigtimedwait(STOP_SIGNALS, WATCH_INTERVAL)
        if info is not None:
            return info.si_signo
        for index, alive in enumerate(servers.alive()):
            if not alive and index not in reported:
                reported.add(index)
                print(f"master {servers.urls[index]} has exited", file=sys.stderr, flush=True)
