"""What a lock tells about itself, written once for every kind and both APIs: its loggers, its
stats (LockStats), and the Events its steps hand to the client's observers (see events.py).

Nothing here runs on a healthy, unobserved lock cycle: the steps call in only when someone listens
(`session.tell` is not None) or when a round's votes were not all OK.

Loggers, by subject (all under "hiredlock"; nothing above DEBUG for a normal contended wait):
    hiredlock.lock      acquire, release, extend: DEBUG per failed attempt; WARNING when a lock
                        is lost, or an unlock after an exception failed
    hiredlock.renewal   auto-renewal: INFO for a renewal retried, WARNING when it stops
    hiredlock.masters   DEBUG per master that failed (timed out, broke, answered an error) or was
                        not waited for in a round that waits for every master
    hiredlock.close     what close() could not release
    hiredlock.callbacks on_lost and other callbacks that raised
    hiredlock.events    an event observer that raised (once per observer and client)
Masters are named as the client names them (passwords redacted).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, NamedTuple, Optional

from .errors import QuorumUnreachable, Vote
from .events import Event, EventKind, Operation, Teller
from .scripts import FAILURES, Outcome

if TYPE_CHECKING:
    from .._engines.contract import RoundResult
    from .lock_state import LockState
    from .session import Session

DEBUG = logging.DEBUG

lock_log = logging.getLogger("hiredlock.lock")
renewal_log = logging.getLogger("hiredlock.renewal")
masters_log = logging.getLogger("hiredlock.masters")
close_log = logging.getLogger("hiredlock.close")
callbacks_log = logging.getLogger("hiredlock.callbacks")

# The votes of a healthy round: `codes.strip(HEALTHY_...)` is empty (one short call in C, on the
# hot path) unless some vote is of another kind, as in a degraded round (see degraded()).
HEALTHY_ACQUIRE = bytes([Outcome.OK, Outcome.TAKEN, Outcome.SKIPPED])
HEALTHY_WAIT_ALL = bytes([Outcome.OK, Outcome.TAKEN])


class LockStats(NamedTuple):
    """What one acquisition of a lock cost and did (`lock.stats`; a local view: no I/O).

    waited:           seconds the acquire() call that took the lock spent, every attempt and
                      pause included (0.0 before the first acquisition).
    attempts:         that call's attempts (1: taken at the first).
    votes:            each master's vote in the round that took it (kept while held and after:
                      `last_votes` is the last FAILED round's).
    renewals:         auto-renewals that succeeded since that acquisition.
    renewals_retried: auto-renewals that failed and were tried again.
    held_for:         seconds from the acquisition to its release (or to its loss); None while it
                      is held, and before the first acquisition.
    """

    waited: float = 0.0
    attempts: int = 0
    votes: tuple[Vote, ...] = ()
    renewals: int = 0
    renewals_retried: int = 0
    held_for: Optional[float] = None


def degraded(codes: bytes, waits_for_all: bool) -> bool:
    """A round that counted while some master failed: TIMEOUT, CONN_ERROR or ERROR; or SKIPPED in
    a round that waits for every master that keeps up (a release, an extend), where only a master
    lagging behind since an earlier timeout is not waited for. An acquire stops waiting once a
    quorum decided: there SKIPPED is a healthy master that was merely slower than the others."""
    return bool(codes.strip(HEALTHY_WAIT_ALL if waits_for_all else HEALTHY_ACQUIRE))


def note_round(
    session: Session,
    tell: Optional[Teller],
    name: str | bytes,
    lock_kind: str,
    operation: Operation,
    result: RoundResult,
) -> None:
    """A round that counted, whose votes were not all OK: the degraded event (if someone listens)
    and a DEBUG line per master that failed (if that is on)."""
    codes = result[0]
    if not degraded(codes, operation != "acquire"):
        return
    votes = session.votes(result)
    if masters_log.isEnabledFor(DEBUG):
        log_failed_masters(name, operation, votes, waits_for_all=operation != "acquire")
    if tell is not None:
        tell(Event("degraded", name, lock_kind, votes, operation=operation))


def log_failed_masters(
    name: object, operation: str, votes: tuple[Vote, ...], waits_for_all: bool = True
) -> None:
    """A DEBUG line per master that failed in a round of `operation` on `name`."""
    for vote in votes:
        if vote.outcome in FAILURES or (waits_for_all and vote.outcome is Outcome.SKIPPED):
            masters_log.debug("hiredlock: %s of %r: master %s", operation, name, vote)


def tell_event(
    tell: Teller,
    kind: EventKind,
    name: str | bytes,
    lock_kind: str,
    votes: tuple[Vote, ...] = (),
    *,
    duration: float = 0.0,
    attempts: int = 0,
    held_for: float = 0.0,
    reason: Optional[str] = None,
) -> None:
    tell(Event(kind, name, lock_kind, votes, duration, attempts, held_for, reason))


def failure_reason(error: BaseException, closed: bool) -> str:
    """An acquire_failed event's reason for the exception that ended the call."""
    if isinstance(error, QuorumUnreachable):
        return "quorum_unreachable"
    if closed:
        return "closed"
    return "interrupted"


# -- what a lock tells (LockState calls these: off its hot path) ---------------------------------


def winning_round(lock: LockState) -> tuple[RoundResult, int, int]:
    """From what the lock's _took kept: the winning round, the wait of its call (ns), and the
    call's attempts."""
    won = lock._won
    if len(won) == 3:  # (round, began, refused): some attempts were refused first
        result, began, refused = won
    else:
        result, began, refused = won, 0, 0
    waited_ns = (lock._acquired_at_ns - began if began else 0) + result[1]
    return result, waited_ns, refused + 1


def stats_of(lock: LockState) -> LockStats:
    """`lock.stats` of a lock acquired at least once."""
    result, waited_ns, attempts = winning_round(lock)
    held_ns = lock._released_ns - lock._acquired_at_ns  # (< 0: still held)
    renewals, retried = lock._renewed
    return LockStats(
        waited_ns / 1e9,
        attempts,
        lock._session.votes(result),
        renewals,
        retried,
        held_ns / 1e9 if held_ns >= 0 else None,
    )


def tell_acquired(lock: LockState) -> None:
    """The acquired event (and degraded, when a master failed in the winning round)."""
    session = lock._session
    result, waited_ns, attempts = winning_round(lock)
    note_round(session, session.tell, lock._name, lock._told_kind, "acquire", result)
    tell = session.tell
    if tell is not None:
        votes = session.votes(result)
        tell(Event("acquired", lock._name, lock._told_kind, votes, waited_ns / 1e9, attempts))


def tell_released(lock: LockState, result: RoundResult) -> None:
    """The released event (and degraded), for a release that counted."""
    session = lock._session
    tell = session.tell
    note_round(session, tell, lock._name, lock._told_kind, "release", result)
    if tell is not None:
        held_for = (lock._released_ns - lock._acquired_at_ns) / 1e9
        votes = session.votes(result)
        kind = lock._told_kind
        tell(Event("released", lock._name, kind, votes, result[1] / 1e9, 0, held_for))


def tell_lost(lock: LockState, votes: tuple[Vote, ...], reason: str) -> None:
    tell = lock._session.tell
    if tell is not None:
        held_for = (lock._released_ns - lock._acquired_at_ns) / 1e9
        kind = lock._told_kind
        tell(Event("lost", lock._name, kind, votes, held_for=held_for, reason=reason))
