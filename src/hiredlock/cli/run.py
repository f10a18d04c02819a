"""`hiredlock run NAME -- COMMAND`: a distributed flock(1).

Takes the lock (waiting up to --wait seconds), runs COMMAND while an auto-renewing lock is held,
passes signals on to it, and releases the lock when it ends. If a renewal fails (the lock is
lost), COMMAND is terminated. Exit statuses: see exits.py (and docs/cli.md).

Signals: the ones passed on (and SIGCHLD) are blocked in every thread from the start and taken
with sigtimedwait() by the main thread, which learns who sent them: Ctrl-C from our own terminal
already reached a command in our process group and is not sent twice.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import time
from typing import TYPE_CHECKING, Optional

from .child import Child, open_fds
from .exits import LOST, SIGNALLED, UNREACHABLE, USAGE, CliError
from .masters import (
    NAMESPACE_ENV,
    failed_votes,
    lost_votes,
    master_urls,
    namespace,
    open_redlock,
)
from .output import say

if TYPE_CHECKING:
    from hiredlock import Lock

FORWARDED = (
    signal.SIGHUP,
    signal.SIGINT,
    signal.SIGQUIT,
    signal.SIGTERM,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
WAITED = (*FORWARDED, signal.SIGCHLD)  # SIGCHLD: the command ended, or (sent by us) lock lost
POLL = 1.0  # seconds between checks at most; SIGCHLD wakes the main thread at once
RETRY_DELAY = 0.1  # seconds between tries (randomised x0.5 to x1.5)
# What the command finds in its environment (see lock_environment)
ENV_NAME = "HIREDLOCK_LOCK_NAME"
ENV_TOKEN = "HIREDLOCK_TOKEN"  # the lock's token: a process may adopt the lock with it
ENV_VALIDITY = "HIREDLOCK_VALIDITY"  # seconds the lock was valid for as the command started
ENV_TTL = "HIREDLOCK_TTL"  # seconds: the ttl it is renewed for
ENV_FENCE = "HIREDLOCK_FENCE"  # with --fencing: the lock's fence
ENV_OWNER = "HIREDLOCK_OWNER"  # with --owner: the owner label stored with the token
TRIES = 3  # tries at least (--wait 0 too); also: tries in a row with too few masters answering


def command(options: argparse.Namespace) -> int:
    if not options.command:
        raise CliError(
            "run: no COMMAND (usage: hiredlock run NAME [options] -- COMMAND [ARGS...])", USAGE
        )
    urls, source = master_urls(options.masters)
    options.inherited_fds = open_fds()  # passed on to the command; the ones we open are not
    # Before any thread starts (the library's watchdog): every thread inherits the mask.
    signal.pthread_sigmask(signal.SIG_BLOCK, WAITED)
    try:
        return _run(options, urls, source)
    finally:
        while signal.sigtimedwait(WAITED, 0) is not None:
            pass  # what arrived at the very end goes with the exit status already decided
        signal.pthread_sigmask(signal.SIG_UNBLOCK, WAITED)


def _run(options: argparse.Namespace, urls: list[str], source: str) -> int:
    from hiredlock import HiredlockError

    # Each master may take up to a tenth of the ttl (50 to 250 ms) to answer: more than the
    # library's default (5%, at most 50 ms), so that one slow round on a loaded machine does not
    # count as a failed renewal, which would end the command.
    timeout = min(max(options.ttl / 10, 0.05), 0.25)
    prefix = namespace(options.namespace)
    redlock = open_redlock(urls, source, master_timeout=timeout, namespace=prefix)
    try:
        try:
            lock = redlock.lock(
                options.name,
                options.ttl,
                auto_renew=True,
                on_lost=_wake,
                fencing=options.fencing,
                owner=options.owner,
            )
        except (ValueError, TypeError) as exc:
            raise CliError(str(exc), USAGE) from None
        _acquire(lock, options)
        try:
            env = lock_environment(lock, prefix)
            child = Child(options.command, options.inherited_fds, env)
        except CliError:
            _release(lock, HiredlockError)
            raise
        status = _supervise(child, lock, options)
        if status != LOST or not lock.lost.is_set():
            _release(lock, HiredlockError)
        return status
    finally:
        redlock.close()


def lock_environment(lock: Lock, prefix: Optional[str] = None) -> dict[str, str]:
    """The command's environment: ours, and what it needs to know of its lock (a process it
    starts may adopt it by its token: lock(NAME, ttl, token=HIREDLOCK_TOKEN,
    owner=HIREDLOCK_OWNER), on a Redlock of namespace=HIREDLOCK_NAMESPACE)."""
    env = dict(os.environ)
    if prefix:
        env[NAMESPACE_ENV] = prefix
    for stale in (ENV_TOKEN, ENV_FENCE, ENV_OWNER):  # (from a hiredlock run around this one)
        env.pop(stale, None)
    name = lock.name
    env[ENV_NAME] = name if isinstance(name, str) else name.decode("utf-8", "surrogateescape")
    env[ENV_TOKEN] = lock.token or ""
    env[ENV_VALIDITY] = f"{lock.validity:.3f}"
    env[ENV_TTL] = f"{lock.ttl:g}"
    if lock.fence is not None:
        env[ENV_FENCE] = str(lock.fence)
    if lock.owner is not None:
        env[ENV_OWNER] = lock.owner
    return env


def _wake(_lock: object) -> None:
    """on_lost, in the on_lost thread: wakes the main thread out of sigtimedwait()."""
    os.kill(os.getpid(), signal.SIGCHLD)


def _acquire(lock: Lock, options: argparse.Namespace) -> None:
    """Tries until the lock is ours, or --wait has passed and TRIES were made.

    Even with --wait 0 a few quick tries are made: contenders that start at the same moment
    (cron on several machines) may split the masters' votes so that none has a majority; each
    then unlocks everything, and their random retry delays settle it.
    """
    from hiredlock import QuorumUnreachable

    deadline = time.monotonic() + options.wait  # inf: for ever
    unreachable = None
    tries = tries_unreachable = 0
    while True:
        tries += 1
        try:
            if lock.acquire(blocking=False):
                return
            tries_unreachable = 0
        except QuorumUnreachable as exc:
            unreachable = CliError(
                f"lock {options.name!r}: masters unreachable: {failed_votes(exc.votes)}",
                UNREACHABLE,
            )
            tries_unreachable += 1
            if tries_unreachable >= TRIES:
                raise unreachable from None
        now = time.monotonic()
        if now >= deadline and tries >= TRIES:
            if tries_unreachable:
                raise unreachable  # type: ignore[misc]
            waited = f" after waiting {options.wait:g} s" if options.wait else ""
            message = f"lock {options.name!r} is busy (held by another holder){waited}"
            raise CliError("" if options.quiet else message, options.busy_exit_code)
        delay = RETRY_DELAY * random.uniform(0.5, 1.5)
        if now < deadline:
            delay = min(delay, deadline - now)
        info = signal.sigtimedwait(WAITED, delay)
        if info is not None and info.si_signo != signal.SIGCHLD:
            name = signal.Signals(info.si_signo).name
            raise CliError(
                f"{name} while waiting for lock {options.name!r}", SIGNALLED + info.si_signo
            )


def _supervise(child: Child, lock: Lock, options: argparse.Namespace) -> int:
    """Waits for the command, passing signals on; terminates it if the lock is lost."""
    while True:
        status = child.poll()
        if status is not None:
            return status
        if lock.lost.is_set():
            say(
                f"lock {options.name!r} was lost while the command ran "
                f"({lost_votes(lock.last_votes)}): terminating the command"
            )
            child.terminate(options.kill_after, WAITED)
            return LOST
        info = signal.sigtimedwait(WAITED, POLL)
        if info is not None and info.si_signo != signal.SIGCHLD:
            child.forward(info)


def _release(lock: Lock, errors: type[BaseException]) -> None:
    try:
        lock.release()
    except errors as exc:  # the command has ended: a failed release is worth a warning only
        say(f"warning: releasing lock {lock.name!r}: {lost_votes(getattr(exc, 'votes', ()))}")
