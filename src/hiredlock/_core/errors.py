"""The exception hierarchy. Every failure a caller can act on has its own type and carries votes."""

from __future__ import annotations

from typing import NamedTuple, Optional

from .scripts import Outcome


class Vote(NamedTuple):
    """One master's answer in one round: which master, what it said, and the error text if any."""

    master: str
    outcome: Outcome
    detail: Optional[str] = None

    def __str__(self) -> str:
        text = f"{self.master}: {self.outcome.name}"
        return f"{text} ({self.detail})" if self.detail else text


def _describe(votes: tuple[Vote, ...]) -> str:
    return "; ".join(str(vote) for vote in votes)


class HiredlockError(Exception):
    """Base class of every error this library raises on purpose."""


class _VotesError(HiredlockError):
    def __init__(self, message: str, votes: tuple[Vote, ...] = ()) -> None:
        self.votes = tuple(votes)
        super().__init__(f"{message} [{_describe(self.votes)}]" if self.votes else message)


class LockNotAcquired(_VotesError):
    """The lock was not acquired: held by another client, or no valid quorum in time."""


class QuorumUnreachable(LockNotAcquired):
    """Masters failed (timeouts, connection errors, error replies) so no quorum could answer."""


class MasterConfigError(QuorumUnreachable):
    """Too many masters refused us for configuration, not for an outage: a wrong password
    (WRONGPASS), none given where one is required (NOAUTH), or an ACL that forbids the lock's
    commands or keys (NOPERM). Retrying cannot help, so acquire raises it at once."""


class LockLost(_VotesError):
    """Release or extend found the lock no longer held by a quorum of masters."""


class TooManyExtensions(HiredlockError):
    """extend() was called more often than the lock's max_extensions allows."""


class NotHeld(HiredlockError, RuntimeError):
    """Release or extend of a lock this object does not hold (never acquired, or released)."""


class AlreadyAcquired(HiredlockError, RuntimeError):
    """acquire() of a Lock object that holds its lock already (make another Lock, or an RLock)."""


class EngineUnavailable(HiredlockError, ImportError):
    """The engine asked for (backend= or HIREDLOCK_IMPL) cannot be loaded here."""


class SemaphoreSizeMismatch(HiredlockError, ValueError):
    """A semaphore was asked for with another number of permits than the one its holders took
    their permits under (stored with it on the masters): `name`, `permits` (asked for) and
    `stored` (on the masters)."""

    def __init__(self, name: object, permits: int, stored: int) -> None:
        self.name = name
        self.permits = permits
        self.stored = stored
        super().__init__(
            f"semaphore {name!r} has {stored} permits on the masters, not {permits}: every "
            f"client must ask for the same number (it may change once every permit taken under "
            f"{stored} is released or has expired)"
        )
