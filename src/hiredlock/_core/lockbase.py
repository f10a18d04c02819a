"""One named lock's state and algorithm, written once for Lock (blocking) and AsyncLock (asyncio).

LockBase holds what a lock is (its name, ttl, options, token, validity, fence, lost flag) and
its steps: generators that yield the rounds to run and judge their results (see _core/requests.py).
The API classes add only how those steps are driven and how they wait, what "the owner" is (a thread
or a task), and the kind of the `lost` event.

State changes happen under a short mutex, never held across a round: the owner and the renewal
(a watchdog thread, or a task) may act at the same time, and every judgement checks that the
acquisition it was made for is still the current one. An extend never creates a key, so a renewal
whose round crosses a release can never bring the lock back.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable, Optional

from .._engines.contract import RoundResult
from . import config as _config
from . import fork as _fork
from . import judgement as _judgement
from . import scripts as _scripts
from .config import Duration
from .errors import (
    AlreadyAcquired,
    HiredlockError,
    LockLost,
    NotHeld,
    QuorumUnreachable,
    TooManyExtensions,
)
from .requests import Cleanup, Pause, Request, RunScript, SetNx, Steps, script
from .session import Session, Timing
from .tokens import new_token

if TYPE_CHECKING:
    from .client import ClientBase

_new = tuple.__new__  # a NamedTuple request from its fields, in C (see _acquire_request)

_OK = int(_scripts.Outcome.OK)
_RELEASE = _scripts.RELEASE
_EXTEND = _scripts.EXTEND
_RELEASE_SHA = _RELEASE.sha
_RELEASE_SOURCE = _RELEASE.source

_log = logging.getLogger("hiredlock")


class LockBase:
    """The state and steps of one lock; see Lock and hiredlock.aio.AsyncLock for the API.

    Made by a client's lock() (a Redlock's or an AsyncRedlock's), with its options; no I/O
    happens here.
    """

    __slots__ = (
        "__weakref__",
        "_acquired_at_ns",
        "_acquisition",
        "_auto_renew",
        "_blocking_timeout",
        "_channel",
        "_drift_ms",
        "_extensions",
        "_fence",
        "_fencing",
        "_gate",
        "_generation",
        "_key",
        "_last_codes",
        "_last_votes",
        "_lost",
        "_lost_event",
        "_max_extensions",
        "_max_hold_ns",
        "_mutex",
        "_name",
        "_notices",
        "_on_lost",
        "_owner",
        "_pin",
        "_registry_ref",
        "_released_by_close",
        "_rounds",
        "_session",
        "_timeout_ms",
        "_token",
        "_ttl_ms",
        "_unlocked_token",
        "_valid_until_ns",
    )

    _kind = "Lock"

    def __init__(
        self,
        client: ClientBase,
        name: str | bytes,
        ttl: Duration,
        *,
        blocking_timeout: Optional[Duration] = None,
        auto_renew: bool = False,
        max_hold: Optional[Duration] = None,
        on_lost: Optional[Callable[..., Any]] = None,
        max_extensions: Optional[int] = None,
        fencing: bool = False,
        wake: Optional[bool] = None,
    ) -> None:
        self._session = session = client.session
        self._rounds = session.rounds
        self._key = _config.lock_name(name)
        self._name = name
        self._ttl_ms, self._timeout_ms, self._drift_ms = session.timing(ttl)
        self._blocking_timeout = (
            None
            if blocking_timeout is None
            else _config.non_negative_seconds(blocking_timeout, "blocking_timeout")
        )
        # (bools are taken as they are: acquire_many makes a lock per name)
        self._auto_renew = (
            auto_renew if auto_renew is False else _config.flag(auto_renew, "auto_renew")
        )
        self._max_hold_ns: Optional[int] = None
        if max_hold is not None:
            if not self._auto_renew:
                raise ValueError("max_hold bounds auto-renewal: it needs auto_renew=True")
            self._max_hold_ns = int(_config.positive_duration_ms(max_hold, "max_hold") * 1e6)
        if on_lost is not None and not callable(on_lost):
            raise TypeError(f"on_lost must be callable, not {type(on_lost).__name__}")
        self._on_lost = on_lost
        self._max_extensions = (
            None
            if max_extensions is None
            else _config.non_negative_int(max_extensions, "max_extensions")
        )
        self._fencing = fencing if fencing is False else _config.flag(fencing, "fencing")
        # what wakes this lock's waits on a release (None: only the retry timer)
        woken = session.wake if wake is None else _config.flag(wake, "wake")
        self._notices = session.notices if woken else None
        self._channel: Optional[bytes] = None  # _wake_channel(), made on first use
        self._mutex = threading.Lock()
        # held by the thread or task of this process that holds the lock object (see _sync/gate.py),
        # from its acquire() until the token is let go
        self._gate = self._new_gate()
        self._generation = _fork.generation  # the process (see _fork) this state belongs to
        self._token: Optional[bytes] = None
        self._unlocked_token: Optional[bytes] = None  # the last token unlocked after an interrupt
        self._valid_until_ns = 0
        self._acquired_at_ns = 0
        self._acquisition = 0  # bumped by every acquire and release: stale renewals see it
        self._owner: Any = None
        self._lost = False
        self._fence: Optional[int] = None
        self._extensions = 0
        self._last_votes: tuple = ()
        self._last_codes: Optional[bytes] = None  # per-master outcomes of the last failed attempt
        self._lost_event: Any = None  # made on first use: see `lost`
        self._registry_ref: Any = None  # this lock's entry in the session's registry, made once
        self._released_by_close = False  # close() let this acquisition go (see _close_steps)
        # The engine this lock's next rounds must use, when its last one left commands behind on
        # a master (see _engines/blocking.py, run_python): a one-item list, shared by a batch's
        # locks.
        self._pin: list = [None]

    # -- the rounds of this kind of lock (read and write locks say otherwise) -------------------

    def _acquire_request(self, token: bytes) -> Request:
        # (made as tuple.__new__ does: half of every lock cycle, without a Python-level call)
        return _new(SetNx, ((self._key,), (token,), self._ttl_ms, self._timeout_ms))

    def _release_request(self, token: bytes) -> Request:
        # (script(_RELEASE, ...) spelled out: this is half of every lock cycle)
        argvs = ((self._key, token),)
        timeout_ms = self._timeout_ms
        return _new(
            RunScript, (_RELEASE_SHA, _RELEASE_SOURCE, 1, argvs, timeout_ms, True, False, False)
        )

    def _unlock_request(self, token: bytes, kind: type, expiry: bool = False) -> Request:
        """The unlock after an attempt that failed (kind RunScript: best effort, see the engine
        contract's honour_backoff) or that an exception interrupted (Cleanup). expiry: its
        replies also say when the holder's keys expire (see _free_in)."""
        argvs = ((self._key, token),)
        if expiry:
            return script(
                _scripts.RELEASE_AFTER_FAILURE,
                1,
                argvs,
                self._timeout_ms,
                True,
                want_values=True,
                honour_backoff=True,
            )
        return script(
            _RELEASE, 1, argvs, self._timeout_ms, True, honour_backoff=kind is RunScript, kind=kind
        )

    def _free_in(self, unlocked: RoundResult) -> Optional[float]:
        """In how many ms the name frees itself, from an unlock made with expiry=True."""
        return _judgement.free_in_ms(unlocked[0], unlocked[3], self._session.quorum)

    def _extend_request(self, token: bytes, ttl_ms: int, timeout_ms: float) -> Request:
        return script(_EXTEND, 1, ((self._key, token, str(ttl_ms).encode()),), timeout_ms, True)

    def _wake_channel(self) -> bytes:
        """Where this lock's release is announced (see _engines/notices.py)."""
        return _scripts.released_channel(self._key)

    # -- what the API classes provide ------------------------------------------------------------

    def _new_lost_event(self) -> Any:
        raise NotImplementedError

    def _new_gate(self) -> Any:
        """The local gate: a ThreadGate or an asyncio TaskGate."""
        raise NotImplementedError

    def _current_owner(self) -> Any:
        """The thread or task acquiring: renewal stops once it has ended."""
        raise NotImplementedError

    @staticmethod
    def _owner_ended(owner: Any) -> bool:
        raise NotImplementedError

    def _start_renewal(self, acquisition: int, due_ns: int) -> bool:
        """Schedules the first renewal; False when none can run."""
        raise NotImplementedError

    def _after_on_lost(self, outcome: Any) -> None:
        """What on_lost returned (an asyncio lock awaits a coroutine's)."""

    def _call_on_lost_soon(self) -> None:
        """Calls on_lost for a loss a renewal found, where it cannot delay other renewals."""
        self._call_on_lost()

    # -- state ---------------------------------------------------------------------------------

    @property
    def name(self) -> str | bytes:
        return self._name

    @property
    def key(self) -> bytes:
        return self._key

    @property
    def ttl(self) -> float:
        """The ttl in seconds (as sent: whole milliseconds)."""
        return self._ttl_ms / 1000.0

    @property
    def token(self) -> Optional[str]:
        """This holder's random token (40 hex characters) while acquired, else None."""
        token = self._token
        if token is None or self._generation != _fork.generation:
            return None
        return token.decode()

    @property
    def lost(self) -> Any:
        """Set when the lock is found lost while held (a failed renewal or extend)."""
        self._this_process()
        event = self._lost_event
        if event is None:
            with self._mutex:  # one Event, even when the renewal asks at the same time
                if self._lost_event is None:
                    self._lost_event = self._new_lost_event()
                event = self._lost_event
        return event

    @property
    def fence(self) -> Optional[int]:
        """With fencing=True: a number larger than every earlier holder's, while held."""
        return self._fence if self._generation == _fork.generation else None

    @property
    def validity(self) -> float:
        """Seconds the lock is still guaranteed to be ours (0.0 when not held or lost)."""
        if self._token is None or self._lost or self._generation != _fork.generation:
            return 0.0
        return max(0.0, (self._valid_until_ns - time.monotonic_ns()) / 1e9)

    @property
    def held(self) -> bool:
        """Acquired, not released, not lost, and still valid (a local view: no I/O)."""
        return self.validity > 0.0

    @property
    def extensions(self) -> int:
        """How many times extend() succeeded since the last acquire. Auto-renewals are not
        counted, here or anywhere else (max_extensions does not cap them; max_hold does)."""
        return self._extensions

    @property
    def last_votes(self) -> tuple:
        """The masters' votes in this lock's last failed round."""
        return self._last_votes

    @property
    def blocking_timeout(self) -> Optional[float]:
        return self._blocking_timeout

    # -- fork ----------------------------------------------------------------------------------

    def _held_by_parent(self) -> bool:
        """True in a forked child for a lock its parent held at the fork (and forgets it here)."""
        if self._generation == _fork.generation:
            return False
        held = self._token is not None
        self._this_process()
        return held

    def _this_process(self) -> None:
        """In a forked child, the first touch forgets what the parent held: the lock is the
        parent's, and nothing the child does may send anything for it. The mutex is new: a parent
        thread (the watchdog, say) may have held it at the fork, and it would never be let go."""
        if self._generation == _fork.generation:
            return
        self._mutex = threading.Lock()
        self._gate = self._new_gate()
        self._lost_event = None
        self._token = None
        self._lost = False
        self._fence = None
        self._valid_until_ns = 0
        self._acquisition += 1
        self._registry_ref = None
        self._pin = [None]  # the parent's engine: its connections are not the child's
        self._generation = _fork.generation

    # -- acquire -------------------------------------------------------------------------------

    def _forget_expired(self) -> None:
        """A lock whose validity ran out (or that was lost) is let go locally before a new
        acquire: its keys expire with their ttl, and its renewals stop."""
        with self._mutex:
            self._token = None
            self._lost = False
            self._fence = None
            self._valid_until_ns = 0
            self._acquisition += 1
        self._session.held.pop(id(self), None)

    # -- the local gate: one thread or task of this process holds the object at a time ---------

    def _try_gate(self) -> Optional[bool]:
        """An acquire's first step, in the API class: True when the gate is ours now; None when
        the caller holds it already (the steps then raise AlreadyAcquired, or take a lock that
        expired again); False when another thread or task holds it (wait, or give up)."""
        if self._generation != _fork.generation:
            self._this_process()
        gate = self._gate
        if gate.try_enter():
            return True
        return None if gate.mine() else False

    def _leave_gate_unless_held(self) -> None:
        """After an acquire that ended without the lock (or was interrupted anywhere): the
        caller's gate goes to the next waiter."""
        if self._token is None and self._gate.mine():
            self._gate.leave()

    def _acquire_steps(self, blocking: Any, deadline_ns: Optional[int]) -> Steps:
        """Attempts until acquired (True), given up (False) or refused (an exception), until
        `deadline_ns` (see acquire_deadline, which checks the arguments before any I/O); counted
        as under way for the client's close() (see Session.begin_acquire)."""
        return (yield from counted_acquire(self._session, self._attempts(blocking, deadline_ns)))

    def _attempts(self, blocking: Any, deadline_ns: Optional[int]) -> Steps:
        """The attempts of _acquire_steps.

        This lock's state is checked first, before any request.

        An attempt that fails unlocks every master. An exception in the middle of one (Ctrl-C,
        a signal handler's exception, a cancelled task, an engine error, the client closed as
        it won) must not leave our token on the masters for the whole ttl: the unlock is sent
        first, then it propagates.
        """
        if self._generation != _fork.generation:
            self._this_process()
        if self._token is not None:
            if self.validity > 0.0:
                raise AlreadyAcquired(
                    f"lock {self._name!r} is already acquired by this {self._kind} object"
                )
            self._forget_expired()
        retrying = None
        notices = self._notices
        if notices is not None:
            channel = self._channel
            if channel is None:
                channel = self._channel = self._wake_channel()
            splits = 0  # attempts in a row that split the masters with rivals
        session = self._session
        while True:
            session.check_open()  # (closed during the pause: no more attempts)
            # (the notices heard before this attempt: one that comes before the pause begins
            # ends the pause at once)
            seen = 0 if notices is None else notices.heard.get(channel, 0)
            token = new_token()
            start = time.monotonic_ns()
            try:
                if self._fencing:
                    failed, fence = yield from self._fenced_rounds(token, start)
                else:
                    result = (yield self._acquire_request(token))[0]
                    failed = self._refusal(result, result[1])
                    fence = None
                if failed is None:
                    if not self._took(token, start, fence):
                        raise HiredlockError(closed_while_acquiring(self._name))
                    return True
            except BaseException:
                yield from self._unlock_steps(token)
                raise
            # (with notices: and learn when the holder's keys expire)
            try:
                unlocked = (yield self._unlock_request(token, RunScript, notices is not None))[0]
            except BaseException:
                # interrupted before it went out, or while it ran: it goes out again, as a
                # clean-up, whatever happens to the caller
                yield from self._unlock_steps(token)
                raise
            self._refused(failed)
            if retrying is None:
                retrying = _judgement.Retrying(
                    self._name, session.quorum, session, blocking, deadline_ns
                )
            delay = retrying.after_failure(self._last_codes, self._last_votes)
            if delay is None:
                return False
            if notices is None:
                yield Pause(delay, None, None, 0.0, 0, session.closing)
            else:
                delay = _judgement.wake_delay(delay, self._free_in(unlocked))
                splits = splits + 1 if _judgement.split_with_rivals(failed[0]) else 0
                settle = _judgement.settle_after_notice(failed[1], splits, session.retry_delay)
                yield Pause(delay, notices, channel, settle, seen, session.closing)

    def _fenced_rounds(self, token: bytes, start: int) -> Steps:
        """Acquire with a fence: (the failed round or None, the fence).

        Round 1 takes the lock and bumps the name's counter where it was taken; the fence is the
        largest counter of that quorum. Round 2 raises the counter on every master to the fence,
        so that every later quorum meets a master already past it: fences only ever grow.
        """
        fence_key = _scripts.fence_key(self._key)
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
            return first, None
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
        return self._refusal(second, time.monotonic_ns() - start), fence

    def _unlock_steps(self, token: bytes) -> Steps:
        """Sends the unlock for `token` to every master after an interruption (one round, bounded
        by the per-master timeout), and forgets the lock if it was already taken. Best effort: a
        failure here is logged, and the interruption that brought us here is what propagates."""
        if self._token == token:
            self._let_go()
        self._unlocked_token = token
        if self._session.rounds_closed:
            return  # nothing went out (a closed client refuses every round), nor can it now
        try:
            yield self._unlock_request(token, Cleanup)
        except Exception as exc:
            _log.warning("hiredlock: unlocking %r after an exception failed: %s", self._name, exc)

    def _refusal(self, result: RoundResult, elapsed_ns: int) -> Optional[RoundResult]:
        """None when `result` is a valid quorum (elapsed counted from the first round's start)."""
        if _judgement.won(
            result[0], elapsed_ns, self._ttl_ms, self._drift_ms, self._session.quorum
        ):
            return None
        return result

    def _took(self, token: bytes, start: int, fence: Optional[int]) -> bool:
        """The lock is ours from `start` (before the first write of the winning round); False,
        and nothing taken, when the client was closed meanwhile (the caller unlocks: close()
        releases only the locks it finds held)."""
        session = self._session
        ref = self._registry_ref
        if ref is None:
            ref = self._registry_ref = session.registry_entry(self)
        with session.mutex:
            if session.closed:
                return False
            with self._mutex:
                self._token = token
                self._lost = False
                if self._lost_event is not None:
                    self._lost_event.clear()
                self._fence = fence
                self._extensions = 0
                self._valid_until_ns = start + int((self._ttl_ms - self._drift_ms) * 1_000_000)
                self._acquired_at_ns = start
                # renewal stops once the owner (thread or task) has ended
                self._owner = self._current_owner() if self._auto_renew else None
                self._acquisition += 1
                self._released_by_close = False
                acquisition = self._acquisition
            session.held[id(self)] = ref
        self._last_votes = ()
        self._last_codes = None
        if self._auto_renew and not self._start_renewal(
            acquisition, start + self._renew_interval_ns()
        ):
            self._mark_lost(acquisition, "renewal cannot run: the client is closed")
        return True

    def _refused(self, failed: RoundResult) -> None:
        """Keeps the votes of a failed attempt (whoever made it has unlocked every master)."""
        self._last_votes = self._session.votes(failed)
        self._last_codes = failed[0]

    # -- release -------------------------------------------------------------------------------

    def _release_steps(self) -> Steps:
        """Unlocks every master; LockLost when fewer than a quorum still held our token."""
        # Taken before letting go: an interrupt may come inside let_go, after it forgot the
        # token (a signal handler runs at the next call into C), and the unlock must still go out.
        token = self._token
        try:
            token, lost = self._let_go()
            result = (yield self._release_request(token))[0]
        except NotHeld:
            if self._released_by_close and self._session.closed:
                self._released_by_close = False
                return  # close() released it a moment ago: one of the two releases wins
            raise  # nothing of ours to unlock (in a forked child: the parent's lock)
        except BaseException:
            if token is not None:  # interrupted: the unlock still goes out
                yield from self._unlock_steps(token)
            raise
        if lost or result[0].count(_OK) < self._session.quorum:
            raise self._released(result, lost)

    def _close_steps(self) -> Steps:
        """close()'s release of this lock: as _release_steps, and silent when its holder released
        it first (whichever release comes second says nothing)."""
        self._released_by_close = True
        try:
            yield from self._release_steps()
        except NotHeld:
            return

    def _let_go(self) -> tuple[bytes, bool]:
        """Forgets the token (no renewal follows); returns it and whether the lock was lost."""
        if self._generation != _fork.generation:
            self._this_process()
        with self._mutex:
            token = self._token
            if token is None:
                raise NotHeld(f"lock {self._name!r} is not held by this {self._kind} object")
            lost = self._lost
            self._token = None
            self._lost = False
            self._fence = None
            self._valid_until_ns = 0
            self._acquisition += 1  # renewals of this acquisition are dropped
        self._session.held.pop(id(self), None)
        gate = self._gate
        if gate.held:
            gate.leave()
        return token, lost

    def _released(self, result: RoundResult, lost: bool) -> Optional[LockLost]:
        """The error for a release round's result, or None when a quorum released."""
        if not lost and result[0].count(_OK) >= self._session.quorum:
            return None
        self._last_votes = self._session.votes(result)
        return LockLost(
            f"lock {self._name!r} was no longer held by a quorum when released", self._last_votes
        )

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
        failed = yield from self._extend_round(timing, acquisition)
        if failed is None:
            with self._mutex:
                self._extensions += 1
            return
        if self._mark_lost(acquisition, None):
            raise LockLost(
                f"lock {self._name!r} could not be extended on a quorum", self._last_votes
            )
        raise NotHeld(f"lock {self._name!r} was released while it was being extended")

    def _extend_round(self, timing: Optional[Timing], acquisition: int) -> Steps:
        """One extend round: None when it counted (the validity is moved on), else the failed
        round (its votes are kept)."""
        ttl_ms, timeout_ms, drift = timing or (self._ttl_ms, self._timeout_ms, self._drift_ms)
        token = self._token
        if token is None:
            raise NotHeld(f"lock {self._name!r} is not held by this {self._kind} object")
        start = time.monotonic_ns()
        # wait_all: every master that keeps up gets the new ttl (and the EVAL after a NOSCRIPT);
        # the validity still counts from this round's start.
        result = (yield self._extend_request(token, ttl_ms, timeout_ms))[0]
        if _judgement.won(result[0], result[1], ttl_ms, drift, self._session.quorum):
            valid_until = start + int((ttl_ms - drift) * 1_000_000)
            with self._mutex:
                if acquisition == self._acquisition:
                    self._valid_until_ns = valid_until
            return None
        self._last_votes = self._session.votes(result)
        return result

    def _mark_lost(self, acquisition: int, why: Optional[str], renewal: bool = False) -> bool:
        """Marks this acquisition lost (if it is still the current one) and tells the owner:
        `lost` is set first, then on_lost runs (here, or where it cannot delay other renewals
        when a renewal found the loss); False when it is not the current one any more."""
        with self._mutex:
            if acquisition != self._acquisition or self._token is None:
                return False
            self._lost = True
        if why is not None:
            _log.warning("hiredlock: lost %r: %s", self._name, why)
        self.lost.set()
        if self._on_lost is not None:
            if renewal:
                self._call_on_lost_soon()
            else:
                self._call_on_lost()
        return True

    def _call_on_lost(self) -> None:
        if self._on_lost is None:
            return
        try:
            outcome = self._on_lost(self)
        except Exception:
            _log.exception("hiredlock: the on_lost callback of %r raised", self._name)
            return
        self._after_on_lost(outcome)

    def _renew_interval_ns(self) -> int:
        return self._ttl_ms * 1_000_000 // 3

    def _renew_steps(self, acquisition: int) -> Steps:
        """Extends the lock if it is still this acquisition's; returns when to renew next (None:
        no more renewals).

        A failed renewal is retried while the validity left allows another round (see
        _judgement.renewal_retry_ns); the lock is marked lost only when a majority said the key
        is not ours any more, or when no renewal can finish in time.
        """
        if self._generation != _fork.generation:
            return None  # a parent's renewal: never run in a child
        if acquisition != self._acquisition or self._token is None or self._lost:
            return None
        owner = self._owner
        if owner is not None and self._owner_ended(owner):
            _log.warning(
                "hiredlock: the owner that acquired %r ended without releasing it; "
                "it is no longer renewed and expires with its ttl",
                self._name,
            )
            return None
        now = time.monotonic_ns()
        if self._max_hold_ns is not None and now - self._acquired_at_ns >= self._max_hold_ns:
            return None
        failed = yield from self._extend_round(None, acquisition)
        if failed is None:
            return now + self._renew_interval_ns()
        if acquisition != self._acquisition:
            return None
        retry_at = _judgement.renewal_retry_ns(
            failed[0],
            self._session.quorum,
            time.monotonic_ns(),
            self._valid_until_ns,
            self._timeout_ms,
        )
        if retry_at is not None:
            _log.info("hiredlock: renewing %r failed; retrying while it is valid", self._name)
            return retry_at
        self._mark_lost(
            acquisition,
            "could not be extended on a quorum [{}]".format(
                "; ".join(str(vote) for vote in self._last_votes)
            ),
            renewal=True,
        )
        return None

    def __repr__(self) -> str:
        state = "held" if self.held else ("lost" if self._lost else "unlocked")
        return f"<hiredlock.{self._kind} {self._name!r} ttl={self.ttl:g}s {state}>"


def counted_acquire(session: Session, attempts: Steps) -> Steps:
    """An acquire's attempts, counted as under way for the client's close() (see
    Session.begin_acquire: refused once closed)."""
    session.begin_acquire()
    try:
        return (yield from attempts)
    finally:
        session.end_acquire()


def closed_while_acquiring(name: object) -> str:
    return f"the client was closed while {name!r} was being acquired (its keys were unlocked)"


def acquire_deadline(
    blocking: Any, timeout: Optional[Duration], blocking_timeout: Optional[float]
) -> Optional[int]:
    """acquire()'s arguments checked (before any I/O); its deadline on the monotonic clock."""
    if blocking is not True and blocking is not False:
        _config.flag(blocking, "blocking")
    if timeout is not None:
        if not blocking:
            raise ValueError("timeout cannot be given with blocking=False")
        wait_ms = _config.duration_ms(timeout, "timeout")
        if wait_ms < 0:
            raise ValueError(f"timeout must be >= 0 or None, got {timeout!r}")
        return time.monotonic_ns() + int(wait_ms * 1_000_000)
    if blocking and blocking_timeout is not None:
        return time.monotonic_ns() + int(blocking_timeout * 1e9)
    return None


# -- semaphores: a permit is a lock on a key of its own ----------------------------------------


class PermitBase(LockBase):
    """Permit `index` of a semaphore: a lock on a key of its own, `hiredlock:permit:<i>:<name>`
    (Permit and hiredlock.aio.AsyncPermit add the API)."""

    __slots__ = ("_index", "_name_key")

    def __init__(
        self, client: ClientBase, name: str | bytes, index: int, ttl: Duration, **options: Any
    ) -> None:
        super().__init__(client, name, ttl, **options)
        self._index = index
        self._name_key = self._key  # (the name's own key: the permits' keys derive from it)
        self._key = _scripts.permit_key(self._key, index)

    @property
    def index(self) -> int:
        """Which of the semaphore's permits this is (0 .. permits - 1)."""
        return self._index

    def _wake_channel(self) -> bytes:
        return _scripts.released_channel(self._name_key)  # (the semaphore's: see RELEASE)


# How many permits one attempt asks each master for (the first free of them is taken): a few, in
# a random order, so that acquirers running at the same time rarely meet on the same permit.
PERMITS_PER_ROUND = 4


def acquire_permit_steps(
    session: Session,
    name: object,
    template: PermitBase,
    live: dict,
    make_permit: Callable[[int], PermitBase],
    n_permits: int,
    blocking: Any,
    timeout: Optional[Duration],
    blocking_timeout: Optional[float],
    taken: Optional[list] = None,
) -> Steps:
    """One permit of a semaphore of `n_permits` (permit i a lock on a key of its own, so that
    each has one holder at most, judged over a quorum as any lock is).

    An attempt goes through the permits not held through this semaphore object (`live`: index ->
    the permit handed out last) in a random order, a few per round: each master takes the first
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
    return (yield from counted_acquire(session, attempts))


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
    retrying = None
    notices = template._notices
    channel = None if notices is None else template._wake_channel()
    while True:
        session.check_open()  # (closed during the pause: no more attempts)
        seen = 0 if notices is None else notices.heard.get(channel, 0)
        free = [i for i in range(n_permits) if not _held_through(live, i)]
        random.shuffle(free)
        codes: bytes = bytes(len(session.masters))  # (none free here: nothing was asked)
        votes: tuple = ()
        while free:
            batch, free = free[:PERMITS_PER_ROUND], free[PERMITS_PER_ROUND:]
            keys = [_scripts.permit_key(template._name_key, i) for i in batch]
            token = new_token()
            start = time.monotonic_ns()
            request = script(
                _scripts.ACQUIRE_FIRST_FREE,
                len(keys),
                ((*keys, token, ttl_text),),
                timeout_ms,
                wait_all=False,
                want_values=True,
                honour_backoff=True,
            )
            try:
                result = (yield request)[0]
            except BaseException:
                yield from _unlock_keys(name, [(key, token) for key in keys], timeout_ms)
                raise
            codes, elapsed_ns, positions = result[0], result[1], result[3]
            won, won_codes = _judgement.first_free_taken(
                codes, positions, elapsed_ns, ttl_ms, drift_ms, session.quorum
            )
            stray = _judgement.first_free_strays(codes, positions, len(keys), won)
            pairs = [(keys[position - 1], token) for position in stray]
            if pairs:
                try:
                    yield script(_RELEASE, 1, pairs, timeout_ms, True, honour_backoff=True)
                except BaseException:
                    yield from _unlock_keys(name, [(key, token) for key in keys], timeout_ms)
                    raise
            if won:
                permit = make_permit(batch[won - 1])
                if not permit._took(token, start, None):
                    yield from _unlock_keys(name, [(permit.key, token)], timeout_ms)
                    raise HiredlockError(closed_while_acquiring(name))
                live[permit._index] = permit
                if taken is not None:
                    taken[:] = [permit, token]
                return permit, ()
            votes = session.votes((won_codes, elapsed_ns, result[2], None))
            if _judgement.quorum_unreachable(codes, session.quorum):
                break  # (the other permits would meet the same masters)
        if retrying is None:
            retrying = _judgement.Retrying(name, session.quorum, session, blocking, deadline_ns)
        delay = retrying.after_failure(codes, votes)
        if delay is None:
            return None, votes
        yield Pause(delay, notices, channel, 0.0, seen, session.closing)


def _held_through(live: dict, index: int) -> bool:
    """Whether the permit last handed out for `index` is still held (its holder may be any
    thread or task sharing the semaphore object)."""
    permit = live.get(index)
    return permit is not None and permit.held


def give_back_steps(lock: LockBase, token: bytes) -> Steps:
    """Unlocks `lock` if it still holds `token`, which an acquire's steps took just before an
    interrupt came (a signal handler runs as the blocking driver returns)."""
    if lock._token == token and lock._unlocked_token != token:
        yield from lock._unlock_steps(token)


def give_back_many_steps(
    locks: Sequence[LockBase], pairs: Optional[list[tuple[bytes, bytes]]] = None
) -> Steps:
    """Unlocks, after an interruption, the locks of a batch that were taken (they are let go)
    and `pairs` (key, token) besides, in one clean-up round."""
    pairs = list(pairs or ())
    for lock in locks:
        if lock._token is not None:
            pairs.append((lock.key, lock._let_go()[0]))
    if pairs:
        yield from _unlock_keys(f"{len(pairs)} names", pairs, locks[0]._timeout_ms)


def _unlock_keys(name: object, pairs: list[tuple[bytes, bytes]], timeout_ms: float) -> Steps:
    """The unlock of these (key, token) pairs on every master after an interruption (as
    LockBase._unlock_steps does for one lock)."""
    try:
        yield script(_RELEASE, 1, pairs, timeout_ms, True, kind=Cleanup)
    except Exception as exc:
        _log.warning("hiredlock: unlocking %r after an exception failed: %s", name, exc)


# -- batches: the steps of several locks at once (Redlock and AsyncRedlock call them) -----------


def share_pin(locks: Sequence[LockBase], pin: Optional[list] = None) -> list:
    """One pin (see LockBase._pin) for the locks of a batch, which go out together (or for a
    semaphore's permits: `pin`, the semaphore's own)."""
    if pin is None:
        pin = [None]
    for lock in locks:
        lock._pin = pin
    return pin


def pin_of(locks: Sequence[Any]) -> Optional[list]:
    """The pin a batch of locks goes out with: the first one's."""
    return locks[0]._pin if locks and isinstance(locks[0], LockBase) else None


def acquire_many_steps(session: Session, locks: Sequence[LockBase]) -> Steps:
    """One attempt at every lock at once (one round trip per master for the batch); a list with
    each lock acquired and None for the others, which are unlocked everywhere in one more round.
    QuorumUnreachable when the masters failed so that no name could have been acquired."""
    if not locks:
        return []
    keys = [lock.key for lock in locks]
    if len(set(keys)) != len(keys):
        raise ValueError("names must not repeat in one batch")
    return (yield from counted_acquire(session, _batch_attempt(session, locks, keys)))


def _batch_attempt(session: Session, locks: Sequence[LockBase], keys: list[bytes]) -> Steps:
    """The attempt of acquire_many_steps."""
    first = locks[0]  # (made with one ttl: they share its timing)
    ttl_ms, timeout_ms = first._ttl_ms, first._timeout_ms
    tokens = [new_token() for _ in locks]
    start = time.monotonic_ns()
    try:
        results = yield SetNx(keys, tokens, ttl_ms, timeout_ms)
    except BaseException:
        # interrupted: whatever the round set is unlocked on every master
        yield from _unlock_keys(f"{len(keys)} names", list(zip(keys, tokens)), timeout_ms)
        raise
    out: list[Optional[LockBase]] = []
    unlock: list[tuple[bytes, bytes]] = []
    unreachable = 0
    closed = False
    for lock, token, result in zip(locks, tokens, results):
        failed = lock._refusal(result, result[1])
        if failed is None:
            if lock._took(token, start, None):
                out.append(lock)
                continue
            closed = True  # (closed meanwhile: unlocked with the names that were not won)
        else:
            lock._refused(failed)
            unreachable += _judgement.quorum_unreachable(result[0], session.quorum)
        unlock.append((lock.key, token))
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
    session: Session, client: str, lock_class: type, batch: Sequence[Any]
) -> Steps:
    """Releases every lock in one round trip per master; LockLost after the round if some lock
    was no longer held by a quorum (naming them all; the votes are the first one's)."""
    if not batch:
        return None
    # Every lock is checked before any lets go: a bad entry must not leave the ones before it
    # forgotten by their lock objects while their keys stay on the masters.
    for lock in batch:
        if not isinstance(lock, lock_class) or lock._session is not session:
            raise ValueError(f"release_many takes {lock_class.__name__}s of this {client}")
        if lock.token is None:
            raise NotHeld(f"lock {lock.name!r} is not held by this {lock_class.__name__} object")
    if len({id(lock) for lock in batch}) != len(batch):
        raise ValueError("a lock must not repeat in one batch")
    let_go = [lock._let_go() for lock in batch]
    timeout_ms = max(lock._timeout_ms for lock in batch)
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
        if (error := lock._released(result, lost)) is not None
    ]
    if errors:
        names = ", ".join(repr(lock.name) for lock, _error in errors)
        raise LockLost(
            f"{len(errors)} of {len(batch)} locks were no longer held by a quorum: {names}",
            errors[0][1].votes,
        )
    return None


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
    _log.warning("hiredlock: releasing %r on close failed: %s", lock.name, error)
