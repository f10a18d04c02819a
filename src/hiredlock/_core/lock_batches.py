"""The steps of several locks at once, written once for Redlock and AsyncRedlock: acquire_many
(one attempt at every name, one round trip per master) and release_many, and the give-back of a
batch's locks after an interrupt."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from . import clock as _clock
from . import judgement as _judgement
from . import scripts as _scripts
from .errors import (
    HiredlockError,
    LockLost,
    NotHeld,
    QuorumUnreachable,
)
from .events import Event
from .lock_state import LockState
from .lock_steps import LockBase, closed_while_acquiring, unlock_keys
from .multilocks import MultiLockBase
from .requests import SetNx, Steps, script
from .session import Session
from .tokens import new_token


def give_back_many_steps(
    locks: Sequence[LockBase], pairs: Optional[list[tuple[bytes, ...]]] = None
) -> Steps:
    """Unlocks, after an interruption, the locks of a batch that were taken (they are let go)
    and `pairs` (RELEASE's argvs: key, token, channel) besides, in one clean-up round."""
    pairs = list(pairs or ())
    for lock in locks:
        if lock._token is not None:
            pairs.append((lock.key, lock._let_go()[0], lock._announce))
    if pairs:
        yield from unlock_keys(f"{len(pairs)} names", pairs, locks[0]._timeout_ms)


def acquire_many_steps(session: Session, locks: Sequence[LockBase]) -> Steps:
    """One attempt at every lock at once (one round trip per master for the batch); a list with
    each lock acquired and None for the others, which are unlocked everywhere in one more round.
    QuorumUnreachable when the masters failed so that no name could have been acquired."""
    if not locks:
        return []
    keys = [lock.key for lock in locks]
    if len(set(keys)) != len(keys):
        raise ValueError("names must not repeat in one batch")
    return (yield from session.counted_acquire(_batch_attempt(session, locks, keys)))


def _batch_attempt(session: Session, locks: Sequence[LockBase], keys: list[bytes]) -> Steps:
    """The attempt of acquire_many_steps."""
    first = locks[0]  # (made with one ttl: they share its timing)
    ttl_ms, timeout_ms = first._ttl_ms, first._timeout_ms
    tokens = [new_token() for _ in locks]
    start = _clock.monotonic_ns()
    try:
        results = yield SetNx(keys, tokens, ttl_ms, timeout_ms)
    except BaseException:
        # interrupted: whatever the round set is unlocked on every master
        argvs = [(lock.key, token, lock._announce) for lock, token in zip(locks, tokens)]
        yield from unlock_keys(f"{len(keys)} names", argvs, timeout_ms)
        raise
    out: list[Optional[LockBase]] = []
    unlock: list[tuple[bytes, ...]] = []
    unreachable = 0
    closed = False
    tell = session.tell
    for lock, token, result in zip(locks, tokens, results):
        failed = lock._refusal(result, result[1])
        if failed is None:
            if lock._took(token, start, None, result):
                out.append(lock)
                continue
            closed = True  # (closed meanwhile: unlocked with the names that were not won)
        else:
            lock._refused(failed)
            missed = _judgement.quorum_unreachable(result[0], session.quorum)
            unreachable += missed
            if tell is not None:  # (one event per lock of the batch)
                reason = "quorum_unreachable" if missed else "not_acquired"
                votes = lock._last_votes
                event = Event("acquire_failed", lock._name, lock._told_kind, votes, 0.0, 1)
                tell(event._replace(duration=result[1] / 1e9, reason=reason))
        unlock.append((lock.key, token, lock._announce))
        out.append(None)
    if closed:
        yield from give_back_many_steps(locks, unlock)
        raise HiredlockError(closed_while_acquiring(f"{len(locks)} names"))
    if unlock:
        try:
            yield script(_scripts.RELEASE, 1, unlock, timeout_ms, True, honour_backoff=True)
        except BaseException:
            # interrupted: the names acquired are given back too, with the others
            yield from give_back_many_steps(locks, unlock)
            raise
    if unreachable == len(locks):
        raise QuorumUnreachable(
            f"too many masters failed to answer ({session.quorum} of "
            f"{len(session.masters)} needed) for any of {len(locks)} names",
            locks[0].last_votes,
        )
    return out


def release_many_steps(
    session: Session, client: str, lock_class: type[LockBase], batch: Sequence[Any]
) -> Steps:
    """Releases every lock in one round trip per master; LockLost after the round if some lock
    was no longer held by a quorum (naming them all; the votes are the first one's)."""
    if not batch:
        return None
    # Every lock is checked before any lets go: a bad entry must not leave the ones before it
    # forgotten by their lock objects while their keys stay on the masters.
    for lock in batch:
        if (
            not isinstance(lock, lock_class)
            or isinstance(lock, MultiLockBase)  # (its release covers several keys: release())
            or lock._session is not session
        ):
            raise ValueError(f"release_many takes {lock_class.__name__}s of this {client}")
        if lock.token is None:
            raise NotHeld(f"lock {lock.name!r} is not held by this {lock_class.__name__} object")
    if len({id(lock) for lock in batch}) != len(batch):
        raise ValueError("a lock must not repeat in one batch")
    let_go: list[tuple[bytes, bool]] = []
    try:
        for lock in batch:
            let_go.append(lock._let_go())
        timeout_ms = max(lock._timeout_ms for lock in batch)
        results = yield script(
            _scripts.RELEASE,
            1,
            [(lock.key, token, lock._announce) for lock, (token, _lost) in zip(batch, let_go)],
            timeout_ms,
            True,
        )
    finally:
        session.end_acquire(len(let_go))  # (each let go was counted: see LockState._let_go)
    errors = [
        (lock, error)
        for lock, (_token, lost), result in zip(batch, let_go, results)
        if (error := lock._released(result, lost)) is not None
    ]
    if errors:
        names = ", ".join(repr(lock.name) for lock, _error in errors)
        raise LockLost(
            f"{len(errors)} of {len(batch)} locks were no longer held by a quorum: {names}",
            errors[0][1].votes,
        )
    return None


def share_pin(locks: Sequence[LockState], pin: Optional[list[Any]] = None) -> list[Any]:
    """One pin (see LockState._pin) for the locks of a batch, which go out together (or for a
    permit: `pin`, the one of the semaphore's acquire that took it)."""
    if pin is None:
        pin = [None]
    for lock in locks:
        lock._pin = pin
    return pin


def pin_of(locks: Sequence[Any]) -> Optional[list[Any]]:
    """The pin a batch of locks goes out with: the first one's."""
    return locks[0]._pin if locks and isinstance(locks[0], LockState) else None
