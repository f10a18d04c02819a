"""The `hiredlock` command (also `python -m hiredlock`): demo, run, servers, status, unlock.

Each subcommand lives in its own module, imported only when it runs; the terminal extras (rich)
are optional and imported only by the code that draws with them.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Sequence
from typing import Optional

from .exits import RUN_FAILED, USAGE, CliError, Interrupted
from .output import say

DEBUG_ENV = "HIREDLOCK_DEBUG"  # set: errors come with their traceback, library logs are shown


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Runs the command line `argv` (default: sys.argv[1:]); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = bool(os.environ.get(DEBUG_ENV))
    library_log = logging.getLogger("hiredlock")
    if debug:
        logging.basicConfig(level=logging.DEBUG, format="hiredlock: %(message)s")
    else:  # the commands report failures themselves, in one line each
        library_log.addHandler(logging.NullHandler())
        library_log.propagate = False
    try:
        return _dispatch(argv)
    except CliError as exc:
        if str(exc):  # an empty message: a status that speaks for itself (run --quiet)
            say(str(exc))
        return exc.status
    except Interrupted as exc:
        return exc.status
    except KeyboardInterrupt:
        return Interrupted(2).status
    except Exception as exc:
        if debug:
            raise
        say(f"internal error: {type(exc).__name__}: {exc} (set {DEBUG_ENV}=1 for details)")
        return RUN_FAILED


def _dispatch(argv: list[str]) -> int:
    from . import args as cli_args

    command: list[str] = []
    subcommand = next((arg for arg in argv if not arg.startswith("-")), None)
    if subcommand == "run" and "--" in argv:  # everything after the first -- is the command
        split = argv.index("--")
        argv, command = argv[:split], argv[split + 1 :]
    parser = cli_args.build()
    options, unknown = parser.parse_known_args(argv)
    if unknown:  # argparse reports them from the top parser; name the subcommand instead
        where = f"hiredlock {options.command_name}" if options.command_name else "hiredlock"
        parser.error(f"unrecognized arguments: {' '.join(unknown)}", where)
    if options.command_name is None:
        parser.print_help(sys.stderr)
        return USAGE
    if options.command_name == "run":
        from . import run

        options.command = command
        return run.command(options)
    if options.command_name == "status":
        from . import status

        return status.command(options)
    if options.command_name == "unlock":
        from . import unlock

        return unlock.command(options)
    if options.command_name == "servers":
        from . import serve

        return serve.command(options)
    from . import demo

    return demo.command(options)
