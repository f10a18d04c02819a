"""The client-level steps, written once for Redlock and AsyncRedlock: batches of locks, the state
of a name on every master, and the deletion of a fence counter (see _steps.py for how steps run).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, NamedTuple, Optional

from . import _algorithm, _config, _scripts
from ._errors import HiredlockError, LockLost, NotHeld, QuorumUnreachable
from ._lockbase import LockBase
from ._scripts import Outcome
from ._session import Session
from ._steps import SET_NX, Steps, script
from ._tokens import new_token


class KeyState(NamedTuple):
    """What one master holds for a lock name (Redlock.inspect)."""

    master: str
    outcome: Outcome  # OK when the master answered; a failure outcome otherwise
    exists: Optional[bool]  # None when the master did not answer
    pttl_ms: Optional[int]  # ms left; -1: the key has no expiry; None: missing or no answer
    ours: Optional[bool]  # the key holds the token of a lock this Redlock holds
    detail: Optional[str] = None


def check_names(names: Any) -> None:
    if isinstance(names, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"names must be an iterable of names, not a single {type(names).__name__}")


def acquire_many_steps(session: Session, locks: Sequence[LockBase], ttl: Any) -> Steps:
    """One attempt at every lock at once (one round trip per master for the batch); a list with
    each lock acquired and None for the others, which are unlocked everywhere in one more round.
    QuorumUnreachable when the masters failed so that no name could have been acquired."""
    if not locks:
        return []
    keys = [lock.key for lock in locks]
    if len(set(keys)) != len(keys):
        raise ValueError("names must not repeat in one batch")
    ttl_ms, timeout_ms, _drift = session.timing(ttl)
    tokens = [new_token() for _ in locks]
    start = time.monotonic_ns()
    results = yield SET_NX, (keys, tokens, ttl_ms, timeout_ms)
    out: list[Optional[LockBase]] = []
    unlock: list[tuple[bytes, bytes]] = []
    unreachable = 0
    for lock, token, result in zip(locks, tokens, results):
        failed = lock.judge(result)
        if failed is None:
            lock.took(token, start)
            out.append(lock)
            continue
        lock.refused(failed)
        unlock.append((lock.key, token))
        unreachable += _algorithm.quorum_unreachable(result[0], session.quorum)
        out.append(None)
    if unlock:
        yield script(_scripts.RELEASE, 1, unlock, timeout_ms, True, honour_backoff=True)
    if unreachable == len(locks):
        raise QuorumUnreachable(
            f"too many masters failed to answer ({session.quorum} of "
            f"{len(session.masters)} needed) for any of {len(locks)} names",
            locks[0].last_votes,
        )
    return out


def release_many_steps(
    session: Session, client: str, lock_class: type, batch: Sequence[Any]
) -> Steps:
    """Releases every lock in one round trip per master; LockLost after the round if some lock
    was no longer held by a quorum (naming them all; the votes are the first one's)."""
    if not batch:
        return None
    # Every lock is checked before any lets go: a bad entry must not leave the ones before it
    # forgotten by their lock objects while their keys stay on the masters.
    for lock in batch:
        if not isinstance(lock, lock_class) or lock.session is not session:
            raise ValueError(f"release_many takes {lock_class.__name__}s of this {client}")
        if lock.token is None:
            raise NotHeld(f"lock {lock.name!r} is not held by this {lock_class.__name__} object")
    if len({id(lock) for lock in batch}) != len(batch):
        raise ValueError("a lock must not repeat in one batch")
    let_go = [lock.let_go() for lock in batch]
    timeout_ms = max(session.timing(lock.ttl)[1] for lock in batch)
    results = yield script(
        _scripts.RELEASE,
        1,
        [(lock.key, token) for lock, (token, _lost) in zip(batch, let_go)],
        timeout_ms,
        True,
    )
    errors = [
        (lock, error)
        for lock, (_token, lost), result in zip(batch, let_go, results)
        if (error := lock.released(result, lost)) is not None
    ]
    if errors:
        names = ", ".join(repr(lock.name) for lock, _error in errors)
        raise LockLost(
            f"{len(errors)} of {len(batch)} locks were no longer held by a quorum: {names}",
            errors[0][1].votes,
        )
    return None


def inspect_steps(session: Session, name: Any) -> Steps:
    """Every master's view of `name`: exists, PTTL, and whether it is ours (KeyState each)."""
    key = _config.lock_name(name)
    token = session.token_held_for(key)
    result = (
        yield script(
            _scripts.INSPECT,
            1,
            ((key, token),),
            session.master_timeout_ms(_scripts.MAX_TTL_MS),
            wait_all=True,
            want_values=True,
        )
    )[0]
    states = []
    for vote, value in zip(session.votes(result), result[3]):
        if vote.outcome in (Outcome.OK, Outcome.TAKEN):
            exists, pttl, ours = _scripts.unpack_inspect(value)
            states.append(KeyState(vote.master, Outcome.OK, exists, pttl, ours))
        else:
            states.append(KeyState(vote.master, vote.outcome, None, None, None, vote.detail))
    return states


def locked(session: Session, states: Sequence[KeyState]) -> bool:
    """A majority of the masters hold a key for the name (anyone's lock)."""
    return sum(1 for state in states if state.exists) >= session.quorum


def delete_fence_counter_steps(session: Session, name: Any) -> Steps:
    """Deletes the fencing counter of `name` on every master; refused while this client holds
    the lock; QuorumUnreachable if fewer than a quorum answered."""
    key = _config.lock_name(name)
    if session.token_held_for(key):
        raise HiredlockError(f"lock {name!r} is held by this Redlock: release it first")
    result = (
        yield script(
            _scripts.DELETE_KEY,
            1,
            ((_scripts.fence_key(key),),),
            session.master_timeout_ms(_scripts.MAX_TTL_MS),
            wait_all=True,
        )
    )[0]
    answered = len(result[0]) - sum(result[0].count(code) for code in _scripts.FAILURES)
    if answered < session.quorum:
        raise QuorumUnreachable(
            f"the fence counter of {name!r} could not be deleted on a quorum",
            session.votes(result),
        )
    return None
