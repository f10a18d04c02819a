"""One named lock's steps, written once for Lock (blocking) and AsyncLock (asyncio): acquire (its
attempts, retries, fencing, the unlock after a failure or an interrupt), release, extend and the
renewal. They are generators that yield the rounds to run (see _core/requests.py) and leave the
judgement of each round's result to the lock's state (_core/lock_state.py).

An extend never creates a key, so a renewal whose round crosses a release can never bring the lock
back.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any, Optional

from . import judgement as _judgement
from . import observe as _observe
from . import scripts as _scripts
from . import validation as _validation
from .clock import monotonic_ns as _monotonic_ns  # (C calls once compiled: see clock.pxd)
from .errors import (
    AlreadyAcquired,
    HiredlockError,
    LockLost,
    NotHeld,
    TooManyExtensions,
)
from .events import Event, EventKind, Operation
from .fork import generation as _fork_generation
from .judgement import oks as _oks  # (C calls once compiled: see judgement.pxd)
from .judgement import says_more as _says_more
from .judgement import valid_until_ns as _valid_until_ns
from .judgement import won as _round_won
from .lock_state import LockState
from .requests import Cleanup, Pause, RunScript, Steps, heard_on, script
from .session import Timing
from .tokens import new_token
from .validation import Duration

_OK = int(_scripts.Outcome.OK)
_RELEASE = _scripts.RELEASE


class LockBase(LockState):
    """The steps of one lock, on its state (see Lock and hiredlock.aio.AsyncLock for the API).

    Made by a client's lock() (a Redlock's or an AsyncRedlock's), with its options; no I/O
    happens here.
    """

    __slots__ = ()
    # Whether its blocking acquires take turns with the client's others on the same name
    # (_core/turns.py): the kinds whose holders exclude each other and do not queue on the masters.
    _takes_turns = True

    def _turn_gate(self, blocking: Any, object_gate: Optional[bool]) -> Any:
        """The gate of this name's turns for an acquire that takes them (blocking, on a kind
        that takes turns, `object_gate` not None: the caller did not hold this object already),
        else None."""
        if not blocking or object_gate is None or not self._takes_turns:
            return None
        # (the bound method, looked up as Python does: compiled, _new_gate is a C method)
        new_gate = getattr(self, "_new_gate")  # noqa: B009
        return self._session.turns.gate(self._key, new_gate)

    def _turn_missed(self, waited_from_ns: int) -> None:
        """The deadline came before the turn: the call ends without an attempt (told as any
        acquire that stayed taken)."""
        self._not_taken("not_acquired", waited_from_ns, 0, 0)
        self._leave_gate_unless_held()

    def _end_turn(self, turn: Any) -> None:
        """The acquire's call ended: its turn (if it got it) goes to the next waiter, told
        when this lock object holds the lock now (see Turns.took)."""
        turns = self._session.turns
        if turn.mine():
            if self._token is not None:  # (weak: a held lock its caller dropped is not kept)
                turns.took(self._key, (weakref.ref(self), self._acquisition))
            turn.leave()
        turns.done(self._key, turn)

    def _acquire_steps(self, blocking: Any, deadline_ns: Optional[int], turn: Any = None) -> Steps:
        """Attempts until acquired (True), given up (False) or refused (an exception), until
        `deadline_ns` (see acquire_deadline, which checks the arguments before any I/O); counted
        as under way for the client's close() (see Session.begin_acquire). `turn`: the gate of
        the turn the caller holds (see _turn_gate), or None.

        (Not a generator itself: the steps are _attempts', one generator fewer on every
        acquire's path.)"""
        return self._attempts(blocking, deadline_ns, turn)

    def _attempts(
        self, blocking: Any, deadline_ns: Optional[int], turn: Any = None, counted: bool = False
    ) -> Steps:
        """The attempts of _acquire_steps.

        This lock's state is checked first, before any request. In a turn that follows one
        whose call took the lock (a sibling in this client holds it: see _core/turns.py), the
        first attempt waits for its release first (see _while_sibling_holds).

        An attempt that fails unlocks every master. An exception in the middle of one (Ctrl-C,
        a signal handler's exception, a cancelled task, an engine error, the client closed as
        it won) must not leave our token on the masters for the whole ttl: the unlock is sent
        first, then it propagates.

        A call that ends without the lock says why (the acquire_failed event, see _not_taken);
        the acquired one is _took's. (The hot path, an attempt that wins, pays for neither.)

        Counted as under way for the client's close() from the first step to the end (see
        Session.begin_acquire), here rather than by Session.counted_acquire around it as the
        other kinds' attempts are: one generator fewer on every acquire's path. `counted`: the
        caller counts them already (a fair lock's, followed by its queue's steps).
        """
        session = self._session
        if not counted:
            session.begin_acquire()
        try:
            if self._generation != _fork_generation[0]:
                self._this_process()
            if self._token is not None:
                if self.validity > 0.0:
                    raise AlreadyAcquired(
                        f"lock {self._name!r} is already acquired by this {self._kind} object"
                    )
                if self._adopted and not self._lost:
                    raise AlreadyAcquired(
                        f"lock {self._name!r} holds a token handed over by another holder: "
                        "extend(), check() or release() it"
                    )
                self._forget_expired()
            retrying = None
            notices = self._notices
            channel: Any = None
            if notices is not None:
                channel = self._channel
                if channel is None:
                    channel = self._channel = self._wake_channel()
                splits = 0  # attempts in a row that split the masters with rivals
            refused = began = 0  # this call's attempts refused so far, and when the first began
            suffix = self._suffix  # (an owner label: stored after each token)
            if turn is not None:
                holder = session.turns.holder(self._key)
                if holder is not None:
                    yield from self._while_sibling_holds(holder, deadline_ns, channel)
            while True:
                if session.closed:  # (closed during the pause: no more attempts)
                    self._not_taken("closed", began, refused, refused)
                    session.check_open()
                # (the notices heard before this attempt: one that comes before the pause begins
                # ends the pause at once)
                seen = 0 if notices is None else heard_on(session.heard, channel)
                token = new_token()
                if suffix:
                    token += suffix
                start = _monotonic_ns()
                try:
                    if self._fencing:
                        failed, fence, result = yield from self._fenced_rounds(token, start)
                    else:
                        result = (yield self._acquire_request(token))[0]
                        failed = self._refusal(result, result[1])
                        fence = None
                    if failed is None:
                        if not self._took(token, start, fence, result, began, refused):
                            raise HiredlockError(closed_while_acquiring(self._name))
                        return True
                except BaseException as exc:
                    yield from self._unlock_steps(token)
                    why = _observe.failure_reason(exc, session.closed)
                    self._not_taken(why, began or start, refused + 1, refused)
                    raise
                # (with notices: and learn when the holder's keys expire)
                try:
                    unlock = self._unlock_request(token, RunScript, notices is not None)
                    unlocked = (yield unlock)[0]
                except BaseException as exc:
                    # interrupted before it went out, or while it ran: it goes out again, as a
                    # clean-up, whatever happens to the caller
                    yield from self._unlock_steps(token)
                    why = _observe.failure_reason(exc, session.closed)
                    self._not_taken(why, began or start, refused + 1, refused)
                    raise
                began = began or start
                refused += 1
                self._refused(failed, refused)
                if retrying is None:
                    retrying = _judgement.Retrying(
                        self._name, session.quorum, session, blocking, deadline_ns
                    )
                try:
                    delay = retrying.after_failure(failed[0], self._last_votes)
                    if delay is None:
                        self._not_taken("not_acquired", began, refused, refused)
                        return False
                    if notices is None:
                        yield Pause(delay, None, None, 0.0, 0, session.closing)
                    else:
                        delay = _judgement.wake_delay(delay, self._free_in(unlocked))
                        splits = splits + 1 if _judgement.split_with_rivals(failed[0]) else 0
                        settle = _judgement.settle_after_notice(
                            failed[1], splits, session.retry_delay
                        )
                        yield Pause(delay, notices, channel, settle, seen, session.closing)
                except BaseException as exc:  # (QuorumUnreachable, or interrupted in the pause)
                    why = _observe.failure_reason(exc, session.closed)
                    self._not_taken(why, began, refused, refused)
                    raise
        finally:
            if not counted:
                session.end_acquire()

    def _while_sibling_holds(
        self, holder: tuple[weakref.ref[LockBase], int], deadline_ns: Optional[int], channel: Any
    ) -> Steps:
        """Before the first attempt of a turn that follows one whose call took the lock: while
        that lock object (`holder`: a sibling in this client, weakly, and its acquisition) holds
        it, a wait for a release notice on `channel` or the retry timer, whichever comes first
        (none once the deadline has passed). A notice that comes while the sibling still holds
        the lock (a late one of an earlier release) does not end the wait, the end of the
        sibling's validity does. The attempt after it is made whatever ended it."""
        session = self._session
        delay = _judgement.retry_delay_until(session.retry_delay, deadline_ns)
        if delay is None:
            return
        sibling, acquisition = holder
        notices = self._notices
        now = waited_from = _monotonic_ns()
        until = now + int(delay * 1e9)
        try:
            while not session.closed:
                # (the notices heard before the look at the sibling: one after it ends the pause)
                seen = 0 if notices is None else heard_on(session.heard, channel)
                wait_ns = min(until, valid_while(sibling, acquisition)) - now
                if wait_ns <= 0:
                    return
                yield Pause(wait_ns / 1e9, notices, channel, 0.0, seen, session.closing)
                now = _monotonic_ns()
        except BaseException as exc:  # (interrupted in the pause)
            self._not_taken(_observe.failure_reason(exc, session.closed), waited_from, 0, 0)
            raise

    def _not_taken(self, reason: str, began: int, tries: int, refused: int) -> None:
        """The acquire_failed event of a call that ends without the lock (if someone listens):
        its wait, its attempts, the votes of its last failed round (none when `refused`, the
        attempts that were refused, is 0)."""
        tell = self._session.tell
        if tell is None:
            return
        duration = (_monotonic_ns() - began) / 1e9 if began else 0.0
        votes = self._last_votes if refused else ()
        kind = self._told_kind
        tell(Event("acquire_failed", self._name, kind, votes, duration, tries, reason=reason))

    def _fenced_rounds(self, token: bytes, start: int) -> Steps:
        """Acquire with a fence: (the failed round or None, the fence, the round that took the
        lock, as long as both rounds).

        Round 1 takes the lock and bumps the name's counter where it was taken; the fence is the
        largest counter of that quorum. Round 2 raises the counter on every master to the fence,
        so that every later quorum meets a master already past it: fences only ever grow.
        """
        fence_key = self._layout.fence
        ttl = str(self._ttl_ms).encode()
        first = (
            yield script(
                _scripts.ACQUIRE_FENCED,
                2,
                ((self._key, fence_key, token, ttl),),
                self._timeout_ms,
                wait_all=False,
                want_values=True,
                honour_backoff=True,
            )
        )[0]
        if self._refusal(first, first[1]) is not None:
            return first, None, first
        fence = max(value for code, value in zip(first[0], first[3]) if code == _OK)
        second = (
            yield script(
                _scripts.RAISE_FENCE,
                1,
                ((fence_key, str(fence).encode()),),
                self._timeout_ms,
                wait_all=True,
            )
        )[0]
        elapsed_ns = _monotonic_ns() - start
        return self._refusal(second, elapsed_ns), fence, (first[0], elapsed_ns, first[2], None)

    def _unlock_steps(self, token: bytes) -> Steps:
        """Sends the unlock for `token` to every master after an interruption (one round, bounded
        by the per-master timeout), and forgets the lock if it was already taken. Best effort: a
        failure here is logged, and the interruption that brought us here is what propagates."""
        let_go = self._token == token
        if let_go:
            self._let_go()
        self._unlocked_token = token
        try:
            if self._session.rounds_closed:
                return  # nothing went out (a closed client refuses every round), nor can it now
            yield self._unlock_request(token, Cleanup)
        except Exception as exc:
            _observe.lock_log.warning(
                "hiredlock: unlocking %r after an exception failed: %s", self._name, exc
            )
        finally:
            if let_go:  # (counted as under way by _let_go, until this round has ended)
                self._session.end_acquire()

    # -- release -------------------------------------------------------------------------------

    def _release_steps(self) -> Steps:
        """Unlocks every master; LockLost when fewer than a quorum still held our token. Counted
        as under way for the client's close() until its round has ended (see
        LockState._let_go): a lock let go is not one close() releases."""
        # Taken before letting go: an interrupt may come inside let_go, after it forgot the
        # token (a signal handler runs at the next call into C), and the unlock must still go out.
        token = self._token
        session = self._session
        let_go = False
        try:
            try:
                token, lost = self._let_go()
                let_go = True
                result = (yield self._release_request(token))[0]
            except NotHeld:
                if self._released_by_close and session.closed:
                    self._released_by_close = False
                    return  # close() released it a moment ago: one of the two releases wins
                raise  # nothing of ours to unlock (in a forked child: the parent's lock)
            except BaseException:
                if token is not None:  # interrupted: the unlock still goes out
                    yield from self._unlock_steps(token)
                raise
        finally:
            if let_go:
                session.end_acquire()
        # (the quorum test of _released, spelled out: this is half of every lock cycle)
        oks = _oks(result[0])
        if lost or oks < session.quorum:
            raise self._release_lost(result, lost)
        self._released_ns = _monotonic_ns()
        if oks != session.quiet_oks:  # (observed, or a master did not say OK)
            _observe.tell_released(self, result)

    def _close_steps(self) -> Steps:
        """close()'s release of this lock: as _release_steps, and silent when its holder released
        it first (whichever release comes second says nothing)."""
        self._released_by_close = True
        try:
            yield from self._release_steps()
        except NotHeld:
            return

    # -- extend and renewal ------------------------------------------------------------------------

    def _extend_timing(self, ttl: Optional[Duration]) -> Optional[Timing]:
        """Checks extend()'s arguments and this lock's state (before any I/O)."""
        timing = None if ttl is None else self._session.timing(ttl)
        if self._max_extensions is not None and self._extensions >= self._max_extensions:
            raise TooManyExtensions(
                f"lock {self._name!r} was extended {self._extensions} times already "
                f"(max_extensions={self._max_extensions})"
            )
        self._this_process()
        if self._token is None or self._lost:
            raise NotHeld(f"lock {self._name!r} is not held by this {self._kind} object")
        return timing

    def _extend_steps(self, timing: Optional[Timing]) -> Steps:
        """Re-arms the lock; LockLost (and the lock marked lost) when that did not count."""
        acquisition = self._acquisition
        failed = yield from self._extend_round(timing, acquisition, "extend")
        if failed is None:
            with self._mutex.lock:
                self._extensions += 1
            return
        if self._mark_lost(acquisition, None):
            raise LockLost(
                f"lock {self._name!r} could not be extended on a quorum", self._last_votes
            )
        raise NotHeld(f"lock {self._name!r} was released while it was being extended")

    def _extend_round(
        self, timing: Optional[Timing], acquisition: int, operation: Operation
    ) -> Steps:
        """One extend round (of extend(), or of a renewal: `operation`): None when it counted
        (the validity is moved on; the extended or renewed event), else the failed round (its
        votes are kept)."""
        ttl_ms, timeout_ms, drift = timing or (self._ttl_ms, self._timeout_ms, self._drift_ms)
        token = self._token
        if token is None:
            raise NotHeld(f"lock {self._name!r} is not held by this {self._kind} object")
        start = _monotonic_ns()
        # wait_all: every master that keeps up gets the new ttl (and the EVAL after a NOSCRIPT);
        # the validity still counts from this round's start.
        result = (yield self._extend_request(token, ttl_ms, timeout_ms))[0]
        if _round_won(result[0], result[1], ttl_ms, drift, self._session.quorum):
            valid_until = _valid_until_ns(start, ttl_ms, drift)
            with self._mutex.lock:
                if acquisition == self._acquisition:
                    self._valid_until_ns = valid_until
            session = self._session
            if _says_more(result[0], session.quiet_wait_all):  # (observed, or degraded)
                tell = session.tell
                name, kind = self._name, self._told_kind
                _observe.note_round(session, tell, name, kind, operation, result)
                if tell is not None:
                    told: EventKind = "extended" if operation == "extend" else "renewed"
                    tell(Event(told, name, kind, session.votes(result), result[1] / 1e9))
            return None
        self._last_votes = self._session.votes(result)
        if _observe.masters_log.isEnabledFor(_observe.DEBUG):
            _observe.log_failed_masters(self._name, operation, self._last_votes)
        return result

    def _check_steps(self) -> Steps:
        """Asks every master how long our key lives still; the validity this proves (from this
        round's start, less the drift), or LockLost (and the lock marked lost) when fewer than a
        quorum hold our token."""
        self._this_process()
        token = self._token
        if token is None or self._lost:
            raise NotHeld(f"lock {self._name!r} is not held by this {self._kind} object")
        acquisition = self._acquisition
        start = _monotonic_ns()
        result = (yield self._check_request(token))[0]
        session = self._session
        lives = sorted(
            (value - 1 for code, value in zip(result[0], result[3] or ()) if code == _OK),
            reverse=True,
        )
        if len(lives) >= session.quorum:
            live_ms = lives[session.quorum - 1]  # every key of this quorum lives that long
            live_ms -= _judgement.drift_ms(live_ms, session.drift_factor)
            valid_until = start + int(live_ms * 1_000_000)
            if valid_until > _monotonic_ns():
                with self._mutex.lock:
                    if acquisition == self._acquisition:
                        self._valid_until_ns = valid_until
                return self.validity
        self._last_votes = session.votes(result)
        if self._mark_lost(acquisition, None):
            raise LockLost(f"lock {self._name!r} is not held by a quorum", self._last_votes)
        raise NotHeld(f"lock {self._name!r} was released while it was being checked")

    def _renew_steps(self, acquisition: int) -> Steps:
        """Extends the lock if it is still this acquisition's; returns when to renew next (None:
        no more renewals).

        A failed renewal is retried while the validity left allows another round (see
        _judgement.renewal_retry_ns); the lock is marked lost only when a majority said the key
        is not ours any more, or when no renewal can finish in time.
        """
        if self._generation != _fork_generation[0]:
            return None  # a parent's renewal: never run in a child
        if acquisition != self._acquisition or self._token is None or self._lost:
            return None
        owner = self._owner
        if owner is not None and self._owner_ended(owner):
            _observe.renewal_log.warning(
                "hiredlock: the owner that acquired %r ended without releasing it; "
                "it is no longer renewed and expires with its ttl",
                self._name,
            )
            return None
        now = _monotonic_ns()
        if self._max_hold_ns is not None and now - self._acquired_at_ns >= self._max_hold_ns:
            return None
        failed = yield from self._extend_round(None, acquisition, "renew")
        if failed is None:
            renewals, retried = self._renewed
            self._renewed = (renewals + 1, retried)
            return now + self._renew_interval_ns()
        if acquisition != self._acquisition:
            return None
        retry_at = _judgement.renewal_retry_ns(
            failed[0],
            self._session.quorum,
            _monotonic_ns(),
            self._valid_until_ns,
            self._timeout_ms,
        )
        if retry_at is not None:
            renewals, retried = self._renewed
            self._renewed = (renewals, retried + 1)
            _observe.renewal_log.info(
                "hiredlock: renewing %r failed; retrying while it is valid", self._name
            )
            tell = self._session.tell
            if tell is not None:
                reason = "could not be extended on a quorum; retried while it is valid"
                tell(
                    Event(
                        "renewal_retried",
                        self._name,
                        self._told_kind,
                        self._last_votes,
                        failed[1] / 1e9,
                        reason=reason,
                    )
                )
            return retry_at
        self._mark_lost(
            acquisition,
            "could not be extended on a quorum [{}]".format(
                "; ".join(str(vote) for vote in self._last_votes)
            ),
            renewal=True,
        )
        return None


def valid_while(lock: weakref.ref[LockBase], acquisition: int) -> int:
    """Until when (monotonic ns) `lock` is valid if it still holds the lock it took in
    `acquisition` (not let go, not lost, not dropped by its caller); 0 when it does not."""
    held = lock()
    if held is None or held._acquisition != acquisition or held._token is None or held._lost:
        return 0
    return held._valid_until_ns


def closed_while_acquiring(name: object) -> str:
    return f"the client was closed while {name!r} was being acquired (its keys were unlocked)"


def acquire_deadline(
    blocking: Any, timeout: Optional[Duration], blocking_timeout: Optional[float]
) -> Optional[int]:
    """acquire()'s arguments checked (before any I/O); its deadline on the monotonic clock."""
    if blocking is not True and blocking is not False:
        _validation.flag(blocking, "blocking")
    if timeout is not None:
        if not blocking:
            raise ValueError("timeout cannot be given with blocking=False")
        wait_ms = _validation.duration_ms(timeout, "timeout")
        if wait_ms < 0:
            raise ValueError(f"timeout must be >= 0 or None, got {timeout!r}")
        return _monotonic_ns() + int(wait_ms * 1_000_000)
    if blocking and blocking_timeout is not None:
        return _monotonic_ns() + int(blocking_timeout * 1e9)
    return None


def give_back_steps(lock: LockBase, token: bytes) -> Steps:
    """Unlocks `lock` if it still holds `token`, which an acquire's steps took just before an
    interrupt came (a signal handler runs as the blocking driver returns)."""
    if lock._token == token and lock._unlocked_token != token:
        yield from lock._unlock_steps(token)


def unlock_keys(
    name: object,
    pairs: Sequence[tuple[bytes, ...]],
    timeout_ms: float,
    release: _scripts.Script = _RELEASE,
    numkeys: int = 1,
) -> Steps:
    """The unlock of these RELEASE argvs (key, token, channel) on every master after an
    interruption (as LockBase._unlock_steps does for one lock); or of these argvs of another
    `release` script."""
    try:
        yield script(release, numkeys, pairs, timeout_ms, True, kind=Cleanup)
    except Exception as exc:
        _observe.lock_log.warning(
            "hiredlock: unlocking %r after an exception failed: %s", name, exc
        )


# -- closing a client ----------------------------------------------------------------------------


def loss_told(lock: LockBase) -> bool:
    """Read before close() releases `lock`: whether it was marked lost already, its loss told
    (extend() raised LockLost, or the renewal logged it and set `lost`)."""
    return lock._lost


def close_release_failed(lock: LockBase, told: bool, error: BaseException) -> None:
    """close() could not release `lock`: a warning, unless it is the LockLost of a loss told
    already (that release still unlocked the masters that kept the key)."""
    if told and isinstance(error, LockLost):
        return
    _observe.close_log.warning("hiredlock: releasing %r on close failed: %s", lock.name, error)
