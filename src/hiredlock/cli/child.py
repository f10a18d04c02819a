"""The command `hiredlock run` supervises: spawned, signalled, waited for.

Started with posix_spawn: no Python runs between fork and exec (hiredlock has threads by then),
and the child gets an empty signal mask (ours blocks the signals we wait for) and default
SIGPIPE/SIGXFSZ (Python ignores them), as a shell would start it. It inherits the descriptors we
were started with (stdin, stdout, stderr and any other), but none we opened since: the native
engine's sockets to the masters are inheritable and are closed in the child.

In the foreground of a terminal the command stays in our process group, so that it can read
the terminal and gets Ctrl-C from it directly. Anywhere else (cron, scripts, services) it runs in
a process group of its own, and signals go to the whole group: a shell script's children are
stopped with it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from .exits import NOT_EXECUTABLE, NOT_FOUND, RUN_FAILED, CliError

SI_KERNEL = 0x80  # si_code of a signal the kernel sent: the terminal's Ctrl-C, Ctrl-\, hangup


def _in_terminal_foreground() -> bool:
    try:
        return os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp()
    except OSError:
        return False


def open_fds() -> Optional[set[int]]:
    """The descriptors open now (None where /proc/self/fd cannot tell)."""
    try:
        listed = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return None
    fds = set()
    for fd in listed:  # one of them was the listing's own descriptor, closed by now
        try:
            os.fstat(fd)
        except OSError:
            continue
        fds.add(fd)
    return fds


def _ours_since(before: Optional[set[int]]) -> list[int]:
    """Inheritable descriptors opened since `before` (the ones to close in the command)."""
    now = open_fds()
    if before is None or now is None:
        return []
    return [fd for fd in sorted(now - before) if _inheritable(fd)]


def _inheritable(fd: int) -> bool:
    try:
        return os.get_inheritable(fd)
    except OSError:  # closed meanwhile (by another thread)
        return False


class Child:
    def __init__(
        self,
        argv: Sequence[str],
        inherited: Optional[set[int]] = None,
        env: Optional[Mapping[str, str]] = None,
    ) -> None:
        """Starts argv; `inherited`: the descriptors we were started with (open_fds()); `env`:
        its environment (default: ours)."""
        self.own_group = not _in_terminal_foreground()
        options: dict[str, Any] = {
            "setsigmask": (),
            "setsigdef": (signal.SIGPIPE, signal.SIGXFSZ),
            "file_actions": [(os.POSIX_SPAWN_CLOSE, fd) for fd in _ours_since(inherited)],
        }
        if self.own_group:
            options["setpgroup"] = 0
        try:
            environment = os.environ if env is None else env
            self.pid = os.posix_spawnp(argv[0], list(argv), environment, **options)
        except FileNotFoundError:
            raise CliError(f"{argv[0]}: command not found", NOT_FOUND) from None
        except PermissionError as exc:
            raise CliError(f"{argv[0]}: cannot run it: {exc.strerror}", NOT_EXECUTABLE) from None
        except OSError as exc:
            raise CliError(f"{argv[0]}: cannot run it: {exc}", RUN_FAILED) from None
        self.status: Optional[int] = None

    def poll(self) -> Optional[int]:
        """The exit status once the command has ended (128 + N when killed by signal N)."""
        if self.status is None:
            self._reaped(*os.waitpid(self.pid, os.WNOHANG))
        return self.status

    def wait(self) -> int:
        if self.status is None:
            self._reaped(*os.waitpid(self.pid, 0))
        assert self.status is not None
        return self.status

    def _reaped(self, pid: int, wait_status: int) -> None:
        if pid == self.pid:
            code = os.waitstatus_to_exitcode(wait_status)
            self.status = code if code >= 0 else 128 - code

    def forward(self, info: signal.struct_siginfo) -> None:
        """Passes a signal we received on to the command (not twice: a signal from our own
        terminal already reached it when it shares our process group)."""
        if info.si_code == SI_KERNEL and not self.own_group:
            return
        self.send(info.si_signo)

    def send(self, signum: int) -> None:
        """To the command's process group when it has one (also once the command itself has
        ended: what it started may still run), else to the command while it runs."""
        with contextlib.suppress(ProcessLookupError):
            if self.own_group:
                os.killpg(self.pid, signum)
            elif self.status is None:
                os.kill(self.pid, signum)

    def running(self) -> bool:
        """The command, or with a group of its own anything left in that group, still runs."""
        if self.poll() is None:
            return True
        if not self.own_group:
            return False
        try:
            os.killpg(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def terminate(self, kill_after: float, waited: Sequence[int]) -> int:
        """SIGTERM, then SIGKILL to what still runs `kill_after` seconds later; the command's
        status. Signals in `waited` that arrive meanwhile are passed on."""
        self.send(signal.SIGTERM)
        deadline = time.monotonic() + kill_after
        while self.running():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.send(signal.SIGKILL)
                break
            info = signal.sigtimedwait(waited, min(remaining, 0.05))
            if info is not None and info.si_signo != signal.SIGCHLD:
                self.forward(info)
        return self.wait()
