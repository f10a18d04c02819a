"""The command line: subcommands, options and their checks (argparse, from the standard library)."""

from __future__ import annotations

import argparse
import math
from typing import Callable, NoReturn

from .exits import BUSY, USAGE, CliError
from .masters import ENV_VAR, NAMESPACE_ENV

DESCRIPTION = "Redlock distributed locks on Redis, from the command line."
EPILOG = (
    f"Masters: --masters URL[,URL...] (may be repeated), else ${ENV_VAR} (comma-separated). "
    "URLs: redis://[user:password@]host:port/db, rediss://... (TLS), unix:///path?db=N, or "
    "redis+sentinel://[user:password@]host:port[,host:port...]/service_name/db "
    "(a Sentinel-managed master; rediss+sentinel://... for TLS)."
)


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage dump), raised to main() as CliError."""

    def error(self, message: str, prog: str = "") -> NoReturn:
        prog = prog or self.prog
        where = prog.replace("hiredlock", "", 1).strip()  # main() puts "hiredlock: " first
        raise CliError(f"{where + ': ' if where else ''}{message} (see `{prog} --help`)", USAGE)


def number(
    kind: Callable[[str], float], low: float, high: float = math.inf, what: str = ""
) -> Callable[[str], float]:
    """An argparse type: `kind` (int or float) within [low, high]."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"expected {what or kind.__name__}, got {text!r}"
            ) from None
        if math.isnan(value) or not low <= value <= high:
            bounds = f"at least {low:g}" if high == math.inf else f"from {low:g} to {high:g}"
            raise argparse.ArgumentTypeError(f"must be {bounds}, got {text!r}")
        return value

    parse.__name__ = what or kind.__name__  # argparse names the type in its messages
    return parse


def _masters_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--masters",
        action="append",
        metavar="URL[,URL...]",
        help=f"the Redis masters (repeatable); default: ${ENV_VAR}",
    )


def _namespace_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namespace",
        metavar="PREFIX",
        help="the prefix of every key and channel, as Redlock(namespace=) takes it (e.g. "
        f"billing:); default: ${NAMESPACE_ENV}, else none",
    )


def build() -> Parser:
    parser = Parser(prog="hiredlock", description=DESCRIPTION, epilog=EPILOG)
    from hiredlock import __version__

    parser.add_argument("--version", action="version", version=f"hiredlock {__version__}")
    commands = parser.add_subparsers(dest="command_name", metavar="COMMAND")

    demo = commands.add_parser(
        "demo",
        help="the ticket race: no lock, a naive lock, hiredlock",
        description="The ticket race: sellers in separate processes sell one stock of tickets, "
        "with no lock, with a naive SETNX lock, then with hiredlock. Without --masters it starts "
        "its own local servers and stops them on exit. Needs the cli extra "
        "(pip install 'hiredlock[cli]').",
        epilog=EPILOG,
    )
    demo.add_argument(
        "--workers", type=number(int, 2, 64), default=4, help="seller processes (default 4)"
    )
    demo.add_argument(
        "--tickets", type=number(int, 1, 100_000), default=300, help="stock (default 300)"
    )
    _masters_option(demo)
    demo.add_argument(
        "--engine",
        choices=("auto", "native", "python"),
        default="auto",
        help="hiredlock engine (default auto: native when built)",
    )

    run = commands.add_parser(
        "run",
        help="run a command while holding a lock (a distributed flock)",
        usage="hiredlock run NAME [--masters URL[,URL...]] [--namespace PREFIX]\n"
        "                     [--ttl S] [--wait S] [--kill-after S] [-q] [-E N]\n"
        "                     [--fencing] [--owner LABEL]\n"
        "                     -- COMMAND [ARGS...]",
        description="Runs COMMAND only while holding the lock NAME, renewing it (every ttl/3) "
        "while the command runs, and releases it when the command ends. The command finds "
        "its lock in its environment: HIREDLOCK_LOCK_NAME, HIREDLOCK_TOKEN (a process may adopt "
        "the lock with it), HIREDLOCK_VALIDITY (seconds, as it started), HIREDLOCK_TTL, "
        "HIREDLOCK_FENCE (with --fencing), HIREDLOCK_OWNER (with --owner), "
        "HIREDLOCK_NAMESPACE (with a namespace). Exit status: the "
        "command's; 75 (or --busy-exit-code) when the lock is busy, 69 when the masters are "
        "unreachable, 79 when the lock was lost while the command ran (the command is then "
        "terminated), 2 for bad usage, 126/127 when COMMAND cannot be run or is not found.",
        epilog=EPILOG,
    )
    run.add_argument("name", metavar="NAME", help="the lock's name (the Redis key)")
    _masters_option(run)
    _namespace_option(run)
    run.add_argument(
        "--ttl",
        metavar="S",
        type=number(float, 0.001, math.inf, "seconds"),
        default=10.0,
        help="seconds the lock lives unless renewed: how long it outlives a crashed "
        "hiredlock (default 10)",
    )
    run.add_argument(
        "--wait",
        metavar="S",
        type=number(float, 0.0, math.inf, "seconds"),
        default=0.0,
        help="seconds to wait for a busy lock; 0 (default): give up when it is seen held "
        "(after 3 quick tries, ~0.3 s, that settle a tie between simultaneous starts); "
        "inf: wait for ever",
    )
    run.add_argument(
        "--kill-after",
        metavar="S",
        type=number(float, 0.0, 3600.0, "seconds"),
        default=5.0,
        help="when the lock is lost: seconds between SIGTERM and SIGKILL to the command "
        "(default 5)",
    )
    run.add_argument("-q", "--quiet", action="store_true", help="say nothing when the lock is busy")
    run.add_argument(
        "-E",
        "--busy-exit-code",
        metavar="N",
        type=number(int, 0, 255, "an exit status"),
        default=BUSY,
        help=f"exit status when the lock is busy (default {BUSY}; 0: a skipped run is no "
        "failure, e.g. for a systemd timer or a Kubernetes CronJob)",
    )
    run.add_argument(
        "--fencing",
        action="store_true",
        help="take a fenced lock: the command gets its fence in $HIREDLOCK_FENCE",
    )
    run.add_argument(
        "--owner",
        metavar="LABEL",
        help="an owner label stored with the lock, shown by `hiredlock status` (e.g. host:pid)",
    )

    servers = commands.add_parser(
        "servers",
        help="start local masters for development, until Ctrl-C",
        description="Starts local Redis masters on free loopback ports, prints their URLs, "
        "runs until Ctrl-C (or SIGTERM), then stops them and removes their files.",
    )
    servers.add_argument(
        "--count", type=number(int, 1, 64), default=5, help="how many masters (default 5)"
    )

    status = commands.add_parser(
        "status",
        help="who holds a lock, master by master",
        description="Per master: whether the key exists, its PTTL and the holder's token "
        "prefix, the read-write lock's writer and readers, the fair lock's waiters and the "
        "semaphore permits held; then in which ways a majority holds the name. Exit status: 0 "
        "held by a majority (its key, the read-write lock's writer or readers, or a semaphore "
        "permit), 1 not, 2 bad usage or redis-py missing (pip install 'hiredlock[cli]'), 69 too "
        "few masters answered to tell.",
        epilog=EPILOG,
    )
    status.add_argument("name", metavar="NAME", help="the lock's name (the Redis key)")
    _masters_option(status)
    _namespace_option(status)

    unlock = commands.add_parser(
        "unlock",
        help="clear a stuck lock on every master (needs --yes)",
        description="Removes every key of NAME on every master, whoever holds it: the lock's "
        "(or fair lock's) key and queue, the read-write lock's keys, the semaphore's permits; "
        "the fence counter stays (fences only grow). Says what each master removed. Refuses "
        "without --yes. Exit status: 0 a quorum answered, 2 bad usage or no --yes, 69 too few "
        "masters answered (the name may still be held).",
        epilog=EPILOG,
    )
    unlock.add_argument("name", metavar="NAME", help="the lock's name (the Redis key)")
    _masters_option(unlock)
    _namespace_option(unlock)
    unlock.add_argument(
        "--yes", action="store_true", help="confirm: its holders lose the lock at once"
    )
    return parser
