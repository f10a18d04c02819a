"""The exit statuses of the hiredlock command, in one place, and the error that carries one."""

from __future__ import annotations

OK = 0
NOT_HELD = 1  # status: no majority holds the lock
FAILED = 1  # demo: round 3 sold a wrong count, or a seller failed; servers, demo: no server binary
USAGE = 2  # unknown option, bad URL, no masters, bad number (argparse's own status)
UNREACHABLE = 69  # sysexits EX_UNAVAILABLE: too few masters answered for a majority
BUSY = 75  # sysexits EX_TEMPFAIL: run: the lock is held by another holder (after --wait)
LOST = 79  # run: the lock was lost while the command ran; the command was terminated
RUN_FAILED = 125  # run: hiredlock failed otherwise, before the command ran
NOT_EXECUTABLE = 126  # run: COMMAND was found but could not be run (the shell's status)
NOT_FOUND = 127  # run: COMMAND was not found (the shell's status)
SIGNALLED = 128  # + N: killed (the command) or interrupted (hiredlock) by signal N


class CliError(Exception):
    """An error the command reports as one line on stderr, exiting with `status`."""

    def __init__(self, message: str, status: int = USAGE) -> None:
        super().__init__(message)
        self.status = status


class Interrupted(Exception):
    """A signal (SIGINT, SIGTERM, SIGHUP) turned into an exception, so cleanups run."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def status(self) -> int:
        return SIGNALLED + self.signum
