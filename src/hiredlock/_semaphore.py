"""Semaphore: at most `permits` holders of one name at a time, across every client of the
masters; each permit is a Lock on a key of its own (see _core/semaphores.py)."""

from __future__ import annotations

import threading
from typing import Any, Optional

from ._core.errors import HiredlockError, LockNotAcquired, Vote
from ._core.lock_batches import share_pin
from ._core.lock_steps import give_back_steps
from ._core.semaphores import PermitBase, SemaphoreBase
from ._core.validation import Duration
from ._core.with_blocks import release_failed_on_exit
from ._lock import Lock

__all__ = ["Permit", "Semaphore"]


class Permit(PermitBase, Lock):
    """One permit of a Semaphore, with the Lock API: token, validity, held, release(),
    extend(), auto-renewal, lost, on_lost. Its key is `hiredlock:permit:<index>:<name>`."""

    __slots__ = ()
    _kind = "Permit"


class Semaphore(SemaphoreBase[Permit]):
    """At most `permits` holders of `name` at a time. Made by Redlock.semaphore().

    `acquire()` returns a Permit (release it when done) or None; `with semaphore:` takes a
    permit for the block (LockNotAcquired if none came within blocking_timeout). One Semaphore
    object may be shared by threads: each `with` releases the permit its own thread took.
    """

    _permit_class = Permit

    def acquire(
        self, blocking: bool = True, timeout: Optional[Duration] = None
    ) -> Optional[Permit]:
        """A permit, once a quorum granted one; None when none came (blocking=False: after one
        attempt; else at the deadline `timeout`, or the semaphore's blocking_timeout). An
        attempt tries every permit not held through this object; attempts are retried as
        Lock.acquire's are, and raise as they do (QuorumUnreachable, MasterConfigError)."""
        taken: list[Any] = []
        # This call's pin (see LockState._pin), the permit's once taken: the threads sharing
        # this semaphore take and release their permits at once, each behind its own rounds.
        pin: list[Any] = [None]
        try:
            outcome: tuple[Optional[Permit], tuple[Vote, ...]] = self._session.rounds.run(
                self._acquire_steps(blocking, timeout, taken), pin
            )
            permit, votes = outcome
        except BaseException:
            if taken:  # an interrupt once the steps were over: the permit they took goes back
                self._session.rounds.run(give_back_steps(*taken), pin)
            raise
        if permit is None:
            self._refused(votes)
        else:
            share_pin([permit], pin)
        return permit

    def __enter__(self) -> Permit:
        permit = self.acquire(timeout=self._blocking_timeout)
        if permit is None:
            raise LockNotAcquired(
                f"no permit of semaphore {self._name!r} was acquired", self._last_votes
            )
        self._entering(threading.current_thread(), permit)
        return permit

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        permit = self._leaving(threading.current_thread())
        try:
            permit.release()
        except HiredlockError as error:
            release_failed_on_exit(self._name, exc_type, error)
