"""The client-level steps, written once for Redlock and AsyncRedlock: the state of a name on every
master, and the deletion of a fence counter (see _core/requests.py for how steps run). The batches
of locks are in _core/lock_batches.py."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Optional

from . import judgement as _judgement
from . import scripts as _scripts
from . import validation as _validation
from .errors import HiredlockError, QuorumUnreachable
from .requests import Steps, script
from .scripts import Outcome
from .semaphores import MAX_PERMITS as _MAX_PERMITS
from .session import Session

_FAILED = frozenset(int(outcome) for outcome in _scripts.FAILURES)


class KeyState(NamedTuple):
    """What one master holds for a lock name (Redlock.inspect)."""

    master: str
    outcome: Outcome  # OK when the master answered; a failure outcome otherwise
    exists: Optional[bool]  # None when the master did not answer
    pttl_ms: Optional[int]  # ms left; -1: the key has no expiry; None: missing or no answer
    ours: Optional[bool]  # the key holds the token of a lock this Redlock holds
    detail: Optional[str] = None
    # the name's other kinds on this master (None when it did not answer): a read-write lock's
    # writer and live readers, and the fair lock's live tickets in the queue (its waiters, and
    # its holder's while its key lives there, for up to one waiting window after it took the lock)
    writer: Optional[bool] = None
    readers: Optional[int] = None
    waiting: Optional[int] = None
    # the semaphore of that name on this master (None when it has no size record there, or did
    # not answer): its number of permits (stored with it) and how many of them are held there
    permits: Optional[int] = None
    permits_held: Optional[int] = None
    # the owner label its holder stored with its token (lock(..., owner=)): the lock's or fair
    # lock's holder, else the read-write lock's writer (None: no label, or no answer)
    owner: Optional[str] = None


class Removed(NamedTuple):
    """What force_release removed from one master: each key (or the permits of the name's
    semaphore, as its permits' key with "*" for the index) with how many keys went."""

    master: str
    outcome: Outcome  # OK when the master answered; a failure outcome otherwise
    removed: dict[bytes, int]  # key -> keys removed (only those where something was)
    detail: Optional[str] = None


def check_names(names: Any) -> None:
    if isinstance(names, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"names must be an iterable of names, not a single {type(names).__name__}")


def inspect_steps(session: Session, name: Any) -> Steps:
    """Every master's view of `name`: exists, PTTL, and whether it is ours, the state of the
    read-write and fair locks and the semaphore of that name, and its holder's owner label
    (KeyState each; four rounds, five when a label is longer than one chunk)."""
    layout = session.name_keys(name)
    key = layout.key
    token = session.token_held_for(key)
    timeout_ms = session.master_timeout_ms(_scripts.MAX_TTL_MS)
    result = (
        yield script(_scripts.INSPECT, 1, ((key, token),), timeout_ms, True, want_values=True)
    )[0]
    kind_keys = (*layout.rw[:2], *layout.fair)
    kinds = (
        yield script(_scripts.INSPECT_KINDS, 4, (kind_keys,), timeout_ms, True, want_values=True)
    )[0]
    semaphore = (
        yield script(
            _scripts.INSPECT_PERMITS,
            1,
            ((layout.permit_size, *layout.permit_parts),),
            timeout_ms,
            True,
            want_values=True,
        )
    )[0]
    # The owner label: its first chunk, and the others only where a label is that long (with no
    # label, one small round: a round of many scripts piles up on a stopped master)
    holder_keys = (key, layout.rw[0])
    parts = yield script(
        _scripts.OWNER_PART, 2, ((*holder_keys, b"0"),), timeout_ms, True, want_values=True
    )
    if any(value >= _scripts.OWNER_FULL_CHUNK for value in parts[0][3] or ()):
        offsets = range(_scripts.OWNER_CHUNK, _validation.MAX_OWNER_BYTES, _scripts.OWNER_CHUNK)
        rest = tuple((*holder_keys, b"%d" % offset) for offset in offsets)
        parts = [
            *parts,
            *(yield script(_scripts.OWNER_PART, 2, rest, timeout_ms, True, want_values=True)),
        ]
    owners = [
        _scripts.unpack_owner([part[3][i] if part[3] else 0 for part in parts])
        for i in range(len(session.masters))
    ]
    answered = (Outcome.OK, Outcome.TAKEN)
    states = []
    for vote, value, kind_vote, kind_value, owner, sem_code, sem_value in zip(
        session.votes(result), result[3], session.votes(kinds), kinds[3], owners, *semaphore[::3]
    ):
        if vote.outcome not in answered:
            states.append(KeyState(vote.master, vote.outcome, None, None, None, vote.detail))
            continue
        exists, pttl, ours = _scripts.unpack_inspect(value)
        if kind_vote.outcome in answered:
            writer, readers, waiting = _scripts.unpack_inspect_kinds(kind_value)
            kind_state = (writer, readers, waiting)
            permits: tuple[Optional[int], Optional[int]] = (None, None)
            if sem_code in answered:
                permits = _scripts.unpack_inspect_permits(sem_value)
            states.append(
                KeyState(
                    vote.master, Outcome.OK, exists, pttl, ours, None, *kind_state, *permits, owner
                )
            )
        else:
            states.append(
                KeyState(vote.master, Outcome.OK, exists, pttl, ours, kind_vote.detail, owner=owner)
            )
    return states


def connect_steps(session: Session) -> Steps:
    """Opens every master's connection (TCP, TLS handshake, login) in one round that waits for
    each, as a round's first connects do (bounded by the master timeout, at least the connect
    allowance); the masters' votes (OK where the connection is up)."""
    result = (
        yield script(
            _scripts.PING,
            0,
            ((b"1",),),
            session.master_timeout_ms(_scripts.MAX_TTL_MS),
            wait_all=True,
        )
    )[0]
    return session.votes(result)


def locked(session: Session, states: Sequence[KeyState]) -> bool:
    """A majority of the masters hold a key for the name (anyone's lock)."""
    return sum(1 for state in states if state.exists) >= session.quorum


def delete_fence_counter_steps(session: Session, name: Any) -> Steps:
    """Deletes the fencing counter of `name` on every master; refused while this client holds
    the lock; QuorumUnreachable if fewer than a quorum answered."""
    layout = session.name_keys(name)
    if session.token_held_for(layout.key):
        raise HiredlockError(f"lock {name!r} is held by this Redlock: release it first")
    result = (
        yield script(
            _scripts.DELETE_KEY,
            1,
            ((layout.fence,),),
            session.master_timeout_ms(_scripts.MAX_TTL_MS),
            wait_all=True,
        )
    )[0]
    if _judgement.quorum_unreachable(result[0], session.quorum):
        raise QuorumUnreachable(
            f"the fence counter of {name!r} could not be deleted on a quorum",
            session.votes(result),
        )
    return None


def force_release_steps(session: Session, name: Any) -> Steps:
    """Removes every key of `name` on every master (its lock's, or fair lock's, key and queue,
    its read-write lock's keys, its semaphore's permits and size) whoever holds them, but not its
    fence counter (fences must only grow: see delete_fence_counter_steps); what each master
    removed (Removed each). Refused while this client holds the lock."""
    layout = session.name_keys(name)
    key = layout.key
    if session.token_held_for(key):
        raise HiredlockError(f"lock {name!r} is held by this client: release it instead")
    channels = (layout.channel, layout.rw_channel)
    parts = (key, *layout.rw, *layout.fair, layout.permit_size)
    prefix, suffix = layout.permit_parts
    argvs = [(part, b"0", *channels, prefix, suffix) for part in parts]
    argvs.append((key, b"%d" % _MAX_PERMITS, *channels, prefix, suffix))
    permits = prefix + b"*" + suffix  # (how the permits are reported)
    timeout_ms = session.master_timeout_ms(_scripts.MAX_TTL_MS)
    results = yield script(_scripts.FORCE_DELETE, 1, argvs, timeout_ms, True, want_values=True)
    report = []
    for i, master in enumerate(session.master_names):
        vote = session.votes(results[0])[i]
        failed = next(
            (session.votes(result)[i] for result in results if result[0][i] in _FAILED), None
        )
        if failed is not None:
            report.append(Removed(master, failed.outcome, {}, failed.detail))
            continue
        removed: dict[bytes, int] = {}
        for part, result in zip((*parts, permits), results):
            count = result[3][i] if result[3] else 0
            if count:
                removed[part] = count
        report.append(Removed(vote.master, Outcome.OK, removed))
    return report
