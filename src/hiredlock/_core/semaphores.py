"""What Semaphore (blocking) and hiredlock.aio.AsyncSemaphore share: the permits (locks on keys of
their own, PermitBase), the steps that take one (acquire_permit_steps), the options, and which
permits each owner (thread or task) took with `with`."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING, Any, Callable, Generic, Optional, TypeVar

from .._engines.contract import RoundResult
from . import clock as _clock
from . import judgement as _judgement
from . import observe as _observe
from . import scripts as _scripts
from .compat import Unpack
from .errors import HiredlockError, SemaphoreSizeMismatch, Vote
from .events import Event
from .keys import NameKeys
from .lock_steps import (
    LockBase,
    acquire_deadline,
    closed_while_acquiring,
    unlock_keys,
)
from .options import LockOptions
from .requests import Pause, Request, RunScript, Steps, script
from .session import Session
from .tokens import new_token
from .validation import Duration, lock_name, non_negative_int

if TYPE_CHECKING:
    from .client import ClientBase

_PERMIT_RELEASE = _scripts.PERMIT_RELEASE


def permit_release_argv(layout: NameKeys, key: bytes, token: bytes) -> tuple[bytes, ...]:
    """PERMIT_RELEASE's argv for the permit `key` of the semaphore whose keys are `layout`."""
    return (key, layout.permit_size, token, layout.channel, *layout.permit_parts)


# An attempt that finds every permit taken asks each master for all of them, a few per round.
MAX_PERMITS = 1000


class PermitBase(LockBase):
    """Permit `index` of a semaphore: a lock on a key of its own (NameKeys.permit: see
    _core/keys.py) (Permit and hiredlock.aio.AsyncPermit add the API)."""

    __slots__ = ("_index", "_size")
    _takes_turns = False  # (see LockBase)
    _event_kind = "Semaphore"

    def __init__(
        self,
        client: ClientBase,
        name: str | bytes,
        index: int,
        ttl: Duration,
        size: int = 1,
        **options: Unpack[LockOptions[Any]],
    ) -> None:
        super().__init__(client, name, ttl, **options)
        self._index = index
        self._size = str(size).encode()  # the semaphore's number of permits (see _extend_request)
        self._key = self._layout.permit(index)

    @property
    def index(self) -> int:
        """Which of the semaphore's permits this is (0 .. permits - 1)."""
        return self._index

    def _wake_channel(self) -> bytes:
        return self._announce  # (the semaphore's: the name's channel)

    def _release_unsettled(self) -> bool:
        """Acquired, not held now, and no release round of it ended since (it may be under way,
        or have ended in an error, or the permit ran out): its key may be left on some masters."""
        return self._acquired_at_ns > self._released_ns

    # (a permit's release and unlock: PERMIT_RELEASE, so that the size record goes with the last
    # permit; its unlock gives no expiry hint)

    def _release_request(self, token: bytes) -> Request:
        argvs = (permit_release_argv(self._layout, self._key, token),)
        return script(_PERMIT_RELEASE, 2, argvs, self._timeout_ms, True)

    def _unlock_request(self, token: bytes, kind: type, expiry: bool = False) -> Request:
        argvs = (permit_release_argv(self._layout, self._key, token),)
        best_effort = kind is RunScript
        return script(
            _PERMIT_RELEASE, 2, argvs, self._timeout_ms, True, honour_backoff=best_effort, kind=kind
        )

    def _extend_request(self, token: bytes, ttl_ms: int, timeout_ms: float) -> Request:
        # (the semaphore's size is kept on the masters as long as its permits)
        keys = (self._key, self._layout.permit_size)
        argv = (*keys, token, str(ttl_ms).encode(), self._size)
        return script(_scripts.PERMIT_EXTEND, 2, (argv,), timeout_ms, True)


# How many permits one attempt asks each master for (the first free of them is taken): a few, in
# a random order, so that acquirers running at the same time rarely meet on the same permit.
PERMITS_PER_ROUND = 4


def acquire_permit_steps(
    session: Session,
    name: object,
    template: PermitBase,
    live: dict[int, Any],
    make_permit: Callable[[int], PermitBase],
    n_permits: int,
    blocking: Any,
    timeout: Optional[Duration],
    blocking_timeout: Optional[float],
    taken: Optional[list[Any]] = None,
) -> Steps:
    """One permit of a semaphore of `n_permits` (permit i a lock on a key of its own, so that
    each has one holder at most, judged over a quorum as any lock is).

    An attempt goes through the permits not held through this semaphore object (`live`: index ->
    the permit handed out last) in a random order (those whose release may be under way last:
    _permit_order), a few per round: each master takes the first
    of them that is free there and says which (_scripts.ACQUIRE_FIRST_FREE); the permit a quorum
    took, in time, is ours (a new object from make_permit: a permit object is never handed to two
    holders), and whatever else this round set is unlocked on every master. When every permit
    was tried, or the masters failed, the attempt has failed and is retried as a lock's acquire
    is (_judgement.Retrying). Returns (the permit, ()) or (None, the votes of the last round).
    `taken` (a list) gets [permit, token] as soon as the permit is ours: a blocking caller gives
    back exactly that one if an interrupt comes after the steps (give_back_steps).
    """
    deadline_ns = acquire_deadline(blocking, timeout, blocking_timeout)
    attempts = _permit_attempts(
        session, name, template, live, make_permit, n_permits, blocking, deadline_ns, taken
    )
    if session.tell is not None:
        attempts = _told_permit_attempts(session, name, template, attempts)
    return (yield from session.counted_acquire(attempts))


def _told_permit_attempts(
    session: Session, name: Any, template: PermitBase, attempts: Steps
) -> Steps:
    """A semaphore's attempts, with an acquire_failed event when they end without a permit (the
    acquired event is the permit's). Used only when someone listens."""
    began = _clock.monotonic_ns()
    template._trying = (began, 0)
    try:
        permit, votes = yield from attempts
    except BaseException as exc:
        reason = _observe.failure_reason(exc, session.closed)
        _tell_no_permit(session, name, template, began, reason, template._last_votes)
        raise
    if permit is None:
        _tell_no_permit(session, name, template, began, "not_acquired", votes)
    return permit, votes


def _tell_no_permit(
    session: Session,
    name: Any,
    template: PermitBase,
    began: int,
    reason: str,
    votes: tuple[Vote, ...],
) -> None:
    tell = session.tell
    if tell is not None:
        duration = (_clock.monotonic_ns() - began) / 1e9
        tries = template._trying[1]
        kind = template._told_kind
        tell(Event("acquire_failed", name, kind, votes, duration, tries, reason=reason))


def _permit_attempts(
    session: Session,
    name: object,
    template: PermitBase,
    live: dict[int, PermitBase],
    make_permit: Callable[[int], PermitBase],
    n_permits: int,
    blocking: Any,
    deadline_ns: Optional[int],
    taken: Optional[list[Any]],
) -> Steps:
    """The attempts of acquire_permit_steps."""
    ttl_ms, timeout_ms, drift_ms = template._ttl_ms, template._timeout_ms, template._drift_ms
    ttl_text = str(ttl_ms).encode()
    layout = template._layout
    size_key = layout.permit_size
    retrying = None
    notices = template._notices
    channel = None if notices is None else template._wake_channel()
    tries = 0
    began = 0
    while True:
        session.check_open()  # (closed during the pause: no more attempts)
        seen = 0 if notices is None else notices.heard.get(channel, 0)
        tries += 1  # (an attempt goes through the permits, a few per round)
        free = _permit_order(live, n_permits)
        codes: bytes = bytes(len(session.masters))  # (none free here: nothing was asked)
        votes: tuple[Vote, ...] = ()
        while free:
            batch, free = free[:PERMITS_PER_ROUND], free[PERMITS_PER_ROUND:]
            keys = [layout.permit(i) for i in batch]
            token = new_token()
            if template._suffix:  # (an owner label: stored after the token)
                token += template._suffix
            unlock = [permit_release_argv(layout, key, token) for key in keys]
            start = _clock.monotonic_ns()
            if not began:
                began = start
            request = script(
                _scripts.ACQUIRE_FIRST_FREE,
                len(keys) + 1,
                ((*keys, size_key, token, ttl_text, template._size),),
                timeout_ms,
                wait_all=False,
                want_values=True,
                honour_backoff=True,
            )
            try:
                result = (yield request)[0]
            except BaseException:
                yield from unlock_keys(name, unlock, timeout_ms, _PERMIT_RELEASE, 2)
                raise
            codes, elapsed_ns, positions = result[0], result[1], result[3]
            won, won_codes = _judgement.first_free_taken(
                codes, positions, elapsed_ns, ttl_ms, drift_ms, session.quorum
            )
            stray = _judgement.first_free_strays(codes, positions, len(keys), won)
            argvs = [unlock[position - 1] for position in stray]
            if argvs:
                try:
                    yield script(_PERMIT_RELEASE, 2, argvs, timeout_ms, True, honour_backoff=True)
                except BaseException:
                    yield from unlock_keys(name, unlock, timeout_ms, _PERMIT_RELEASE, 2)
                    raise
            if won:
                permit = make_permit(batch[won - 1])
                won_round = RoundResult(won_codes, elapsed_ns, result[2], None)
                if not permit._took(token, start, None, won_round, began, tries - 1):
                    yield from unlock_keys(name, [unlock[won - 1]], timeout_ms, _PERMIT_RELEASE, 2)
                    raise HiredlockError(closed_while_acquiring(name))
                live[permit._index] = permit
                if taken is not None:
                    taken[:] = [permit, token]
                return permit, ()
            votes = session.votes(RoundResult(won_codes, elapsed_ns, result[2], None))
            template._trying = (began, tries)
            template._last_votes = votes
            if _observe.lock_log.isEnabledFor(_observe.DEBUG):
                _observe.lock_log.debug(
                    "hiredlock: an attempt at a permit of %r failed [%s]",
                    name,
                    "; ".join(str(vote) for vote in votes),
                )
                _observe.log_failed_masters(name, "acquire", votes, waits_for_all=False)
            stored = [-position for position in positions if position < 0]
            if stored:  # (refused where the masters keep another size: no retry can help)
                raise SemaphoreSizeMismatch(name, n_permits, max(stored, key=stored.count))
            if _judgement.quorum_unreachable(codes, session.quorum):
                break  # (the other permits would meet the same masters)
        if retrying is None:
            retrying = _judgement.Retrying(name, session.quorum, session, blocking, deadline_ns)
        delay = retrying.after_failure(codes, votes)
        if delay is None:
            return None, votes
        yield Pause(delay, notices, channel, 0.0, seen, session.closing)


def _permit_order(live: dict[int, PermitBase], n_permits: int) -> list[int]:
    """The permits an attempt asks for, in order: those not held through this semaphore object
    (`live`: by any thread or task sharing it), in a random order, except that those let go
    through it whose release round has not ended come last. Such a release may have reached some
    masters and not others: asked for first, that permit would be free on some masters and taken
    on the others, the masters would take different permits, and the attempt could fail with a
    permit free everywhere."""
    free: list[int] = []
    settling: list[int] = []
    for index in range(n_permits):
        permit = live.get(index)
        if permit is None:
            free.append(index)
        elif not permit.held:
            (settling if permit._release_unsettled() else free).append(index)
    random.shuffle(free)
    random.shuffle(settling)
    return free + settling


_P = TypeVar("_P", bound=PermitBase)


class SemaphoreBase(Generic[_P]):
    """A counting semaphore over the masters: at most `permits` holders of `name` at a time,
    across every client. Made by a client's semaphore(); no I/O happens here. The options are
    lock()'s, for each permit (blocking_timeout bounds `with`, as a lock's)."""

    _permit_class: Callable[..., _P]  # the API's permit class (Permit, AsyncPermit)

    def __init__(
        self,
        client: Any,
        name: str | bytes,
        permits: int,
        ttl: Duration,
        **options: Unpack[LockOptions[Any]],
    ) -> None:
        lock_name(name)  # a bad name is refused as lock() refuses it
        if non_negative_int(permits, "permits") < 1 or permits > MAX_PERMITS:
            raise ValueError(f"permits must be in 1..{MAX_PERMITS}, got {permits!r}")
        if options.get("fencing", False) is not False:
            # A fence orders the holders of one name; permits are held side by side.
            raise ValueError("fencing is not supported for semaphore permits")
        self._name = name
        self._session = client.session
        self._n_permits = permits

        def make(index: int) -> _P:
            return self._permit_class(client, name, index, ttl, permits, **options)

        # Permit objects are made per acquisition (one object is never handed to two holders:
        # a late release by an earlier holder must not let go of the next one's permit); this
        # one checks the options now and gives the permits' timing.
        self._template = make(0)
        self._make_permit = make
        self._live: dict[int, _P] = {}  # index -> the permit handed out last for it
        self._entered: dict[Any, list[_P]] = {}  # owner -> the permits its `with` blocks took
        self._blocking_timeout = self._template.blocking_timeout
        self._last_votes: tuple[Vote, ...] = ()

    @property
    def name(self) -> str | bytes:
        return self._name

    @property
    def permits(self) -> int:
        """How many holders the semaphore allows at a time."""
        return self._n_permits

    @property
    def held(self) -> list[_P]:
        """The permits held through this object now (a local view: no I/O)."""
        return [permit for permit in list(self._live.values()) if permit.held]

    def _acquire_steps(
        self, blocking: Any, timeout: Optional[Duration], taken: Optional[list[Any]] = None
    ) -> Steps:
        return acquire_permit_steps(
            self._session,
            self._name,
            self._template,
            self._live,
            self._make_permit,
            self._n_permits,
            blocking,
            timeout,
            self._blocking_timeout,
            taken,
        )

    @property
    def last_votes(self) -> tuple[Vote, ...]:
        """The masters' votes in the last attempt that got no permit (its last round, as a lock's
        votes: OK where a master took the permit most of them took, TAKEN where it took none or
        another)."""
        return self._last_votes

    def _entering(self, owner: Any, permit: _P) -> None:
        self._entered.setdefault(owner, []).append(permit)

    def _leaving(self, owner: Any) -> _P:
        stack = self._entered[owner]
        permit = stack.pop()
        if not stack:
            del self._entered[owner]
        return permit

    def _refused(self, permit_votes: tuple[Vote, ...]) -> None:
        self._last_votes = permit_votes

    def __repr__(self) -> str:
        held = len(self.held)
        return (
            f"<hiredlock.{type(self).__name__} {self._name!r} permits={self._n_permits} "
            f"held here={held}>"
        )
