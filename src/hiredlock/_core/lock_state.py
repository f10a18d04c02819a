"""One named lock's state, and its judgement of the rounds its steps ran (_core/lock_steps.py has
the steps themselves), written once for Lock (blocking) and AsyncLock (asyncio).

LockState holds what a lock is (its name, ttl, options, token, validity, fence, lost flag), the
requests of its kind (read and write locks, fair locks and permits say otherwise), and what a
round's result does to it: taken, refused, let go, released, lost. The API classes add only how
the steps are driven and how they wait, what "the owner" is (a thread or a task), and the kind of
the `lost` event.

State changes happen under a short mutex, never held across a round: the owner and the renewal
(a watchdog thread, or a task) may act at the same time, and every judgement checks that the
acquisition it was made for is still the current one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

from .._engines.contract import RoundResult
from . import judgement as _judgement
from . import observe as _observe
from . import options as _options
from . import scripts as _scripts
from . import validation as _validation
from .clock import monotonic_ns as _monotonic_ns  # (C calls once compiled: see clock.pxd)
from .errors import LockLost, NotHeld, Vote
from .fork import generation as _fork_generation
from .judgement import oks as _oks  # (C calls once compiled: see judgement.pxd)
from .judgement import says_more as _says_more
from .judgement import valid_until_ns as _valid_until_ns
from .judgement import won as _round_won
from .observe import LockStats
from .requests import Request, RunScript, new_run_script, new_set_nx, script
from .state_mutex import StateMutex
from .validation import Duration

if TYPE_CHECKING:
    from .client import ClientBase
    from .compat import Unpack
    from .options import LockKeywords as _Keywords

_TOKEN_CHARS = 2 * _scripts.TOKEN_BYTES
_RELEASE = _scripts.RELEASE
_EXTEND = _scripts.EXTEND
_RELEASE_SHA = _RELEASE.sha
_RELEASE_SOURCE = _RELEASE.source
_NOT_RENEWED = (0, 0)


class LockState:
    """The state of one lock and its judgement of rounds (LockBase, in _core/lock_steps.py, adds
    the steps; see Lock and hiredlock.aio.AsyncLock for the API).

    Made by a client's lock() (a Redlock's or an AsyncRedlock's), with its options; no I/O
    happens here.
    """

    __slots__ = (
        "__weakref__",
        "_acquired_at_ns",
        "_acquisition",
        "_adopted",
        "_announce",
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
        "_layout",
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
        "_released_ns",
        "_renewed",
        "_rounds",
        "_session",
        "_suffix",
        "_timeout_ms",
        "_token",
        "_told_kind",
        "_trying",
        "_ttl_ms",
        "_unlocked_token",
        "_valid_until_ns",
        "_won",
    )

    _kind = "Lock"
    _event_kind = "Lock"  # the lock_kind of its events (the same for both APIs)

    def __init__(
        self, client: ClientBase, name: str | bytes, ttl: Duration, **options: Unpack[_Keywords]
    ) -> None:
        _options.check(type(self).__name__, options, _options.AdoptingOptions)  # (as Lock())
        self._setup(client, name, ttl, **options)

    def _setup(
        self,
        client: ClientBase,
        name: str | bytes,
        ttl: Duration,
        blocking_timeout: Optional[Duration] = None,
        auto_renew: bool = False,
        max_hold: Optional[Duration] = None,
        on_lost: Optional[Callable[..., Any]] = None,
        max_extensions: Optional[int] = None,
        fencing: bool = False,
        wake: Optional[bool] = None,
        owner: Optional[str] = None,
        token: Optional[str] = None,
    ) -> None:
        """__init__'s work, also run on a lock allocated without the type's call (new_lock)."""
        self._session = client.session
        self._rounds = self._session.rounds
        # the name's keys (_core/keys.py): its own, and the channel its releases announce on
        self._layout = layout = self._session.name_keys(name)
        self._key = layout.key
        self._announce = layout.channel
        self._name = name
        self._ttl_ms, self._timeout_ms, self._drift_ms = self._session.timing(ttl)
        if blocking_timeout is not None:
            blocking_timeout = _validation.non_negative_seconds(
                blocking_timeout, "blocking_timeout"
            )
        self._blocking_timeout = blocking_timeout
        # (bools are taken as they are: acquire_many makes a lock per name)
        self._auto_renew = (
            auto_renew if auto_renew is False else _validation.flag(auto_renew, "auto_renew")
        )
        self._max_hold_ns: Optional[int] = None
        if max_hold is not None:
            if not self._auto_renew:
                raise ValueError("max_hold bounds auto-renewal: it needs auto_renew=True")
            self._max_hold_ns = int(_validation.positive_duration_ms(max_hold, "max_hold") * 1e6)
        if on_lost is not None and not callable(on_lost):
            raise TypeError(f"on_lost must be callable, not {type(on_lost).__name__}")
        self._on_lost = on_lost
        if max_extensions is not None:
            max_extensions = _validation.non_negative_int(max_extensions, "max_extensions")
        self._max_extensions = max_extensions
        self._fencing = fencing if fencing is False else _validation.flag(fencing, "fencing")
        # what wakes this lock's waits on a release (None: only the retry timer)
        woken = self._session.wake if wake is None else _validation.flag(wake, "wake")
        self._notices = self._session.notices if woken else None
        self._channel: Optional[bytes] = None  # _wake_channel(), made on first use
        self._mutex = self._session.state_mutex  # (the client's: see state_mutex.py)
        # held by the thread or task of this process that holds the lock object (see _sync/gate.py),
        # from its acquire() until the token is let go; its changes go under the state's mutex
        self._gate = self._new_gate(self._mutex)
        self._generation = _fork_generation[0]  # the process (see _fork) this state belongs to
        self._token: Optional[bytes] = None
        self._unlocked_token: Optional[bytes] = None  # the last token unlocked after an interrupt
        self._valid_until_ns = self._acquired_at_ns = 0
        self._acquisition = 0  # bumped by every acquire and release: stale renewals see it
        self._owner: Any = None
        self._lost = False
        self._fence: Optional[int] = None
        self._extensions = 0
        self._last_votes: tuple[Vote, ...] = ()
        self._last_codes: Optional[bytes] = None  # per-master outcomes of the last failed attempt
        self._lost_event: Any = None  # made on first use: see `lost`
        self._registry_ref: Any = None  # this lock's entry in the session's registry, made once
        self._released_by_close = False  # close() let this acquisition go (see _close_steps)
        # The engine this lock's next rounds must use when its last one left commands behind on a
        # master (_engines/blocking.py, run_python): a one-item list, shared by a batch's locks,
        # one per acquisition (a blocking Lock makes a new one when its object is free at acquire).
        self._pin: list[Any] = [None]
        # What `stats` and the events tell (see _core/observe.py): the winning round, the time
        # the acquire call waited (ns) and its attempts, set by _took; a semaphore's call under
        # way (its start, its attempts: see semaphores.py).
        self._won: Any = None  # a RoundResult, or (RoundResult, began, refused)
        self._trying = (0, 0)
        self._renewed = _NOT_RENEWED  # (renewals done, renewals retried) of this acquisition
        self._released_ns = 0  # when the last acquisition ended (released or lost)
        self._told_kind = self._event_kind
        # what an owner label adds to each token this lock stores on the masters (see
        # validation.owner_label): nothing without one, so the rounds are those of a plain lock
        self._suffix = b"" if owner is None else _validation.owner_label(owner)
        self._adopted = False  # holds a token handed over by another holder (see _adopt)
        if token is not None:
            self._adopt(_validation.lock_token(token))

    # -- the rounds of this kind of lock (read and write locks say otherwise) -------------------

    def _acquire_request(self, token: bytes) -> Request:
        # (made from its fields in C: half of every lock cycle; the keys made once per name, for
        # the kinds whose key is the name's: a permit's or a read-write side's is another)
        layout = self._layout
        keys = layout.keys if self._key is layout.key else (self._key,)
        return new_set_nx(keys, (token,), self._ttl_ms, self._timeout_ms)

    def _release_request(self, token: bytes) -> Request:
        # (script(_RELEASE, ...) spelled out, made from its fields in C: half of every lock cycle)
        argvs = ((self._key, token, self._announce),)
        return new_run_script(
            _RELEASE_SHA, _RELEASE_SOURCE, 1, argvs, self._timeout_ms, True, False, False, False
        )

    def _unlock_request(self, token: bytes, kind: type, expiry: bool = False) -> Request:
        """The unlock after an attempt that failed (kind RunScript: best effort, see the engine
        contract's honour_backoff) or that an exception interrupted (Cleanup). expiry: its
        replies also say when the holder's keys expire (see _free_in)."""
        argvs = ((self._key, token, self._announce),)
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
        return _judgement.free_in_ms(unlocked[0], unlocked[3] or (), self._session.quorum)

    def _extend_request(self, token: bytes, ttl_ms: int, timeout_ms: float) -> Request:
        return script(_EXTEND, 1, ((self._key, token, str(ttl_ms).encode()),), timeout_ms, True)

    def _check_request(self, token: bytes) -> Request:
        """check()'s round: each master says how long our key lives still (see CHECK)."""
        argvs = ((self._key, token),)
        return script(_scripts.CHECK, 1, argvs, self._timeout_ms, True, want_values=True)

    def _wake_channel(self) -> bytes:
        """Where this lock's release is announced (see _engines/notices.py)."""
        return self._announce

    # -- what the API classes provide ------------------------------------------------------------

    def _new_lost_event(self) -> Any:
        raise NotImplementedError

    def _new_gate(self, mutex: Optional[StateMutex] = None) -> Any:
        """A local gate: a ThreadGate or an asyncio TaskGate. A thread gate's changes go under
        `mutex`: the lock object's own gate shares its state mutex (no call of the gate is made
        while that is held), a gate of turns (shared by lock objects) has one of its own."""
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
        if token is None or self._generation != _fork_generation[0]:
            return None
        return token[:_TOKEN_CHARS].decode()

    @property
    def owner(self) -> Optional[str]:
        """The owner label stored with this lock's token on the masters (None: no label)."""
        return self._suffix[1:].decode() if self._suffix else None

    @property
    def adopted(self) -> bool:
        """True while this object holds a token handed over by another holder (lock(...,
        token=)): extend(), check() or release() it; acquire() raises AlreadyAcquired."""
        return self._adopted and self._token is not None

    def _adopt(self, token: bytes) -> None:
        """Takes over a token another holder took: no I/O, and no validity until an extend or a
        check proves the lock is still held (when it was taken is not known here)."""
        if self._fencing:
            raise ValueError(
                "fencing cannot be used with token=: the fence of a lock taken elsewhere is not "
                "known here (its taker passes lock.fence along with its token)"
            )
        if self._auto_renew:
            raise ValueError(
                "auto_renew cannot be used with token=: renewal starts at an acquire; an "
                "adopted lock is extended by extend()"
            )
        self._token = token + self._suffix
        self._adopted = True

    @property
    def lost(self) -> Any:
        """Set when the lock is found lost while held (a failed renewal or extend)."""
        self._this_process()
        event = self._lost_event
        if event is None:
            made = self._new_lost_event()  # (Python code: before the mutex, see state_mutex.py)
            with self._mutex.lock:  # one Event, even when the renewal asks at the same time
                if self._lost_event is None:
                    self._lost_event = made
                event = self._lost_event
        return event

    @property
    def fence(self) -> Optional[int]:
        """With fencing=True: a number larger than every earlier holder's, while held."""
        return self._fence if self._generation == _fork_generation[0] else None

    @property
    def validity(self) -> float:
        """Seconds the lock is still guaranteed to be ours (0.0 when not held or lost)."""
        if self._token is None or self._lost or self._generation != _fork_generation[0]:
            return 0.0
        return max(0.0, (self._valid_until_ns - _monotonic_ns()) / 1e9)

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
    def last_votes(self) -> tuple[Vote, ...]:
        """The masters' votes in this lock's last failed round."""
        return self._last_votes

    @property
    def blocking_timeout(self) -> Optional[float]:
        return self._blocking_timeout

    @property
    def stats(self) -> LockStats:
        """What the last acquisition cost and did: see LockStats (a local view: no I/O)."""
        if self._won is None or self._generation != _fork_generation[0]:
            return LockStats()
        return _observe.stats_of(self)

    # -- fork ----------------------------------------------------------------------------------

    def _held_by_parent(self) -> bool:
        """True in a forked child for a lock its parent held at the fork (and forgets it here)."""
        if self._generation == _fork_generation[0]:
            return False
        held = self._token is not None
        self._this_process()
        return held

    def _this_process(self) -> None:
        """In a forked child, the first touch forgets what the parent held: the lock is the
        parent's, and nothing the child does may send anything for it. The client's mutex is new:
        a parent thread (the watchdog, say) may have held it at the fork, and never let it go."""
        if self._generation == _fork_generation[0]:
            return
        self._session.this_process()  # (its state mutex is replaced first)
        self._mutex = self._session.state_mutex
        self._gate = self._new_gate(self._mutex)
        self._lost_event = None
        self._forget()
        self._registry_ref = None
        self._pin = [None]  # the parent's engine: its connections are not the child's
        self._generation = _fork_generation[0]

    # -- acquire -------------------------------------------------------------------------------

    def _forget_expired(self) -> None:
        """A lock whose validity ran out (or that was lost) is let go locally before a new
        acquire: its keys expire with their ttl, and its renewals stop."""
        with self._mutex.lock:
            self._forget()
        self._session.held.discard(self._registry_ref)

    def _forget(self) -> None:
        """The token let go, locally (under the state mutex, or in a forked child's first touch):
        the renewals of this acquisition are dropped."""
        self._token = None
        self._adopted = False
        self._lost = False
        self._fence = None
        self._valid_until_ns = 0
        self._acquisition += 1

    # -- the local gate: one thread or task of this process holds the object at a time ---------

    def _try_gate(self) -> Optional[bool]:
        """An acquire's first step, in the API class: True when the gate is ours now; None when
        the caller holds it already (the steps then raise AlreadyAcquired, or take a lock that
        expired again); False when another thread or task holds it (wait, or give up)."""
        if self._generation != _fork_generation[0]:
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

    def _refusal(self, result: RoundResult, elapsed_ns: int) -> Optional[RoundResult]:
        """None when `result` is a valid quorum (elapsed counted from the first round's start)."""
        if _round_won(result[0], elapsed_ns, self._ttl_ms, self._drift_ms, self._session.quorum):
            return None
        return result

    def _took(
        self,
        token: bytes,
        start: int,
        fence: Optional[int],
        won: RoundResult,
        began: int = 0,
        refused: int = 0,
    ) -> bool:
        """The lock is ours from `start` (before the first write of the winning round `won`, of
        an acquire call that had `refused` attempts refused, the first at `began`); False, and
        nothing taken, when the client was closed meanwhile (the caller unlocks: close()
        releases only the locks it finds held)."""
        session = self._session
        ref = self._registry_ref
        if ref is None:
            ref = self._registry_ref = session.registry_entry(self)
        # (what may run Python code runs outside the state mutex: see state_mutex.py)
        # Renewal stops once the owner (thread or task) has ended.
        owner = self._current_owner() if self._auto_renew else None
        valid_until_ns = _valid_until_ns(start, self._ttl_ms, self._drift_ms)
        with session.state_mutex.lock:  # (this lock's too: `closed`, `held` and its fields)
            if session.closed:
                return False
            # (the last acquisition's owner and round are dropped once the mutex is free)
            old_owner, old_won = self._owner, self._won
            self._token = token
            self._lost = False
            self._fence = fence
            self._extensions = 0
            self._valid_until_ns = valid_until_ns
            self._acquired_at_ns = start
            self._owner = owner
            self._acquisition += 1
            self._released_by_close = False
            acquisition = self._acquisition
            # (the winning round; with the call's wait and attempts when some were refused)
            self._won = (won, began, refused) if refused else won
            session.held.add(ref)
        del old_owner, old_won
        if len(session.held) > session.held_bound:
            session.held_locks()  # (which takes out the dead references)
        if self._lost_event is not None:
            self._lost_event.clear()
        if self._last_votes:  # (set with _last_codes by a refused attempt, or by a failed round)
            self._last_votes = ()
            self._last_codes = None
        if _says_more(won[0], session.quiet_acquire):  # (observed, or degraded)
            _observe.tell_acquired(self)
        if self._auto_renew:  # (only an auto-renewed lock counts renewals)
            self._renewed = _NOT_RENEWED
            if not self._start_renewal(acquisition, start + self._renew_interval_ns()):
                self._mark_lost(acquisition, "renewal cannot run: the client is closed")
        return True

    def _refused(self, failed: RoundResult, tries: int = 1) -> None:
        """Keeps the votes of a failed attempt (the call's attempt number `tries`; whoever made
        it has unlocked every master)."""
        self._last_votes = votes = self._session.votes(failed)
        self._last_codes = failed[0]
        if _observe.lock_log.isEnabledFor(_observe.DEBUG):
            _observe.lock_log.debug(
                "hiredlock: attempt %d at %r failed [%s]",
                tries,
                self._name,
                "; ".join(str(vote) for vote in votes),
            )
            _observe.log_failed_masters(self._name, "acquire", votes, waits_for_all=False)

    def _let_go(self) -> tuple[bytes, bool]:
        """Forgets the token (no renewal follows); returns it and whether the lock was lost."""
        if self._generation != _fork_generation[0]:
            self._this_process()
        with self._mutex.lock:
            token = self._token
            if token is None:
                raise NotHeld(f"lock {self._name!r} is not held by this {self._kind} object")
            lost = self._lost
            self._forget()
            self._session.under_way += 1  # (close() waits for the caller's end_acquire())
            gate = self._gate  # (freed under the same take of the mutex, unless it has waiters)
            waited = gate.is_held() and gate.leave_under_mutex()
        self._session.held.discard(self._registry_ref)
        if waited:
            gate.leave()
        return token, lost

    def _released(self, result: RoundResult, lost: bool) -> Optional[LockLost]:
        """The error for a release round's result, or None when a quorum released."""
        if not lost and _oks(result[0]) >= self._session.quorum:
            self._released_ns = _monotonic_ns()
            if _says_more(result[0], self._session.quiet_wait_all):  # (observed, or degraded)
                _observe.tell_released(self, result)
            return None
        return self._release_lost(result, lost)

    def _release_lost(self, result: RoundResult, told: bool) -> LockLost:
        """The error of a release round that found the lock lost (its votes kept as last_votes);
        the lost event, unless the loss was told already (`told`: found by a renewal or an
        extend)."""
        self._last_votes = self._session.votes(result)
        if not told:
            self._released_ns = _monotonic_ns()
            _observe.lock_log.debug(
                "hiredlock: %r was no longer held by a quorum when released", self._name
            )
            _observe.tell_lost(self, self._last_votes, "no longer held by a quorum when released")
        return LockLost(
            f"lock {self._name!r} was no longer held by a quorum when released", self._last_votes
        )

    def _mark_lost(self, acquisition: int, why: Optional[str], renewal: bool = False) -> bool:
        """Marks this acquisition lost (if it is still the current one) and tells the owner:
        `lost` is set first, then on_lost runs (here, or where it cannot delay other renewals
        when a renewal found the loss); False when it is not the current one any more."""
        now_ns = _monotonic_ns()  # (before the state mutex: see state_mutex.py)
        with self._mutex.lock:
            if acquisition != self._acquisition or self._token is None:
                return False
            self._lost = True
            self._released_ns = now_ns
        if why is not None:
            _observe.renewal_log.warning("hiredlock: lost %r: %s", self._name, why)
        _observe.tell_lost(self, self._last_votes, why or "could not be extended on a quorum")
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
            _observe.callbacks_log.exception(
                "hiredlock: the on_lost callback of %r raised", self._name
            )
            return
        self._after_on_lost(outcome)

    def _renew_interval_ns(self) -> int:
        return self._ttl_ms * 1_000_000 // 3

    def __repr__(self) -> str:
        state = "held" if self.held else ("lost" if self._lost else "unlocked")
        return f"<hiredlock.{self._kind} {self._name!r} ttl={self.ttl:g}s {state}>"
