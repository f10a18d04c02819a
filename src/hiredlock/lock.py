"""Lock: one named lock on a Redlock's masters: acquire, release, extend, renewal and fencing."""

from __future__ import annotations

import logging
import threading
import time
import weakref
from binascii import hexlify
from os import urandom
from typing import TYPE_CHECKING, Any, Callable, Optional

from . import _algorithm, _config, _fork, _scripts
from ._config import Duration
from ._contract import RoundResult
from ._errors import (
    AlreadyAcquired,
    HiredlockError,
    LockLost,
    LockNotAcquired,
    NotHeld,
    TooManyExtensions,
)

if TYPE_CHECKING:
    from .redlock import Redlock

_OK = int(_scripts.Outcome.OK)
_RELEASE = _scripts.RELEASE
_TOKEN_BYTES = _scripts.TOKEN_BYTES


def new_token() -> bytes:
    """20 bytes from the OS CSPRNG (fork-safe: no user-space state), as 40 hex characters."""
    return hexlify(urandom(_TOKEN_BYTES))


_log = logging.getLogger("hiredlock")


class WithStatement:
    """`with lock:` for Lock and RLock: acquire within the lock's blocking_timeout or raise
    LockNotAcquired (the body never runs unlocked); release on exit. When the body raised, its
    exception wins and a failed release is only logged beside it."""

    __slots__ = ()
    _blocking_timeout: Optional[float]
    _generation: int
    _last_votes: tuple
    _name: str | bytes

    def __enter__(self: Any) -> Any:
        if not self.acquire(timeout=self._blocking_timeout):
            raise LockNotAcquired(f"lock {self._name!r} was not acquired", self._last_votes)
        return self

    def __exit__(self: Any, exc_type: Any, exc: Any, traceback: Any) -> None:
        # (no call before release() unless forked: each call is a point where CPython may run a
        # signal handler, and an interrupt there would skip the release)
        if self._generation != _fork._generation and self._held_by_parent():
            return  # forked inside the block: the lock is the parent's, the child sends nothing
        if exc_type is None:
            self.release()
            return
        try:
            self.release()
        except HiredlockError as release_error:
            _log.warning("releasing %r after an exception failed: %s", self._name, release_error)


class Lock(WithStatement):
    """A Redlock lock on one name. Made by Redlock.lock(); one thread at a time uses it.

    The watchdog (auto_renew) and the owner may touch it concurrently; a private mutex orders them,
    so no renewal ever follows a release.
    """

    __slots__ = (
        "__weakref__",
        "_acquired_at_ns",
        "_acquisition",
        "_auto_renew",
        "_blocking_timeout",
        "_drift_ms",
        "_extensions",
        "_fence",
        "_fencing",
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
        "_on_lost",
        "_owner",
        "_redlock",
        "_registry_ref",
        "_timeout_ms",
        "_token",
        "_ttl_ms",
        "_valid_until_ns",
    )

    def __init__(
        self,
        redlock: Redlock,
        name: str | bytes,
        ttl: Duration,
        *,
        blocking_timeout: Optional[Duration] = None,
        auto_renew: bool = False,
        max_hold: Optional[Duration] = None,
        on_lost: Optional[Callable[[Lock], Any]] = None,
        max_extensions: Optional[int] = None,
        fencing: bool = False,
    ) -> None:
        self._redlock = redlock
        self._key = _config.lock_name(name)
        self._name = name
        self._ttl_ms, self._timeout_ms, self._drift_ms = redlock._timing(ttl)
        self._blocking_timeout = (
            None
            if blocking_timeout is None
            else _config.non_negative_seconds(blocking_timeout, "blocking_timeout")
        )
        # (bools are taken as they are: Redlock.acquire_many makes a Lock per name)
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
        self._mutex = threading.Lock()
        self._generation = _fork._generation  # the process (see _fork) this state belongs to
        self._token: Optional[bytes] = None
        self._valid_until_ns = 0
        self._acquired_at_ns = 0
        self._acquisition = 0  # bumped by every acquire and release: stale renewals see it
        self._owner: Optional[threading.Thread] = None
        self._lost = False
        self._fence: Optional[int] = None
        self._extensions = 0
        self._last_votes: tuple = ()
        self._last_codes: Optional[bytes] = None  # per-master outcomes of the last failed attempt
        self._lost_event: Optional[threading.Event] = None  # made on first use: see `lost`
        self._registry_ref: Optional[weakref.ref] = None  # made by Redlock._holding, once

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
        if token is None or self._generation != _fork._generation:
            return None
        return token.decode()

    @property
    def lost(self) -> threading.Event:
        """Set when the lock is found lost while held (a failed renewal or extend)."""
        self._this_process()
        event = self._lost_event
        if event is None:
            with self._mutex:  # one Event, even when the watchdog asks at the same time
                if self._lost_event is None:
                    self._lost_event = threading.Event()
                event = self._lost_event
        return event

    @property
    def fence(self) -> Optional[int]:
        """With fencing=True: a number larger than every earlier holder's, while held."""
        return self._fence if self._generation == _fork._generation else None

    @property
    def validity(self) -> float:
        """Seconds the lock is still guaranteed to be ours (0.0 when not held or lost)."""
        if self._token is None or self._lost or self._generation != _fork._generation:
            return 0.0
        return max(0.0, (self._valid_until_ns - time.monotonic_ns()) / 1e9)

    @property
    def held(self) -> bool:
        """Acquired, not released, not lost, and still valid (a local view: no I/O)."""
        return self.validity > 0.0

    @property
    def extensions(self) -> int:
        """How many times extend() succeeded since the last acquire."""
        return self._extensions

    @property
    def last_votes(self) -> tuple:
        """The masters' votes in this lock's last failed round."""
        return self._last_votes

    # -- fork ----------------------------------------------------------------------------------

    def _held_by_parent(self) -> bool:
        """True in a forked child for a lock its parent held at the fork (and forgets it here)."""
        if self._generation == _fork._generation:
            return False
        held = self._token is not None
        self._this_process()
        return held

    def _this_process(self) -> None:
        """In a forked child, the first touch forgets what the parent held: the lock is the
        parent's, and nothing the child does may send anything for it. The mutex is new: a parent
        thread (the watchdog, say) may have held it at the fork, and it would never be let go."""
        if self._generation == _fork._generation:
            return
        self._mutex = threading.Lock()
        self._lost_event = None
        self._token = None
        self._lost = False
        self._fence = None
        self._valid_until_ns = 0
        self._acquisition += 1
        self._registry_ref = None
        self._generation = _fork._generation

    # -- acquire -------------------------------------------------------------------------------

    def acquire(self, blocking: bool = True, timeout: Optional[Duration] = None) -> bool:
        """Acquires the lock; True once held by a valid quorum.

        blocking=False tries once. blocking=True retries, after a random delay around the Redlock's
        retry_delay, while the lock is held by others: until `timeout` seconds have passed (an
        overall deadline on the monotonic clock), or the lock's blocking_timeout when timeout is
        None, or for ever when both are None. Returns False when the lock stayed taken. Raises
        QuorumUnreachable when too few masters answered, after retry_count attempts in a row (at
        once when blocking=False), MasterConfigError at once when too many masters refused us for
        a wrong password or missing permissions, and AlreadyAcquired when this Lock object holds
        the lock already. A lock that expired or was lost can be acquired again.
        """
        if blocking is not True and blocking is not False:
            _config.flag(blocking, "blocking")
        deadline_ns: Optional[int] = None
        if timeout is not None:
            if not blocking:
                raise ValueError("timeout cannot be given with blocking=False")
            wait_ms = _config.duration_ms(timeout, "timeout")
            if wait_ms < 0:
                raise ValueError(f"timeout must be >= 0 or None, got {timeout!r}")
            deadline_ns = time.monotonic_ns() + int(wait_ms * 1_000_000)
        elif blocking and self._blocking_timeout is not None:
            deadline_ns = time.monotonic_ns() + int(self._blocking_timeout * 1e9)
        if self._generation != _fork._generation:
            self._this_process()
        if self._token is not None:
            if self.validity > 0.0:
                raise AlreadyAcquired(
                    f"lock {self._name!r} is already acquired by this Lock object"
                )
            self._forget_expired()
        if self._attempt():
            return True
        # (made only now: most acquires succeed at the first attempt, and this is their path)
        retrying = _algorithm.Retrying(
            self._name, self._redlock._quorum, self._redlock, blocking, deadline_ns
        )
        while True:
            delay = retrying.after_failure(self._last_codes, self._last_votes)
            if delay is None:
                return False
            time.sleep(delay)
            if self._attempt():
                return True

    def _forget_expired(self) -> None:
        """A lock whose validity ran out (or that was lost) is let go locally before a new
        acquire: its keys expire with their ttl, and its renewals stop."""
        with self._mutex:
            self._token = None
            self._lost = False
            self._fence = None
            self._valid_until_ns = 0
            self._acquisition += 1
            self._redlock._held.pop(id(self), None)

    def _attempt(self) -> bool:
        """One attempt; on failure every master is unlocked and the votes are kept.

        An exception in the middle (Ctrl-C, a signal handler's exception, or any other) must not
        leave our token on the masters for the whole ttl: the unlock is sent first, then it
        propagates.
        """
        token = hexlify(urandom(_TOKEN_BYTES))  # new_token(), without its frame
        start = time.monotonic_ns()
        try:
            if self._fencing:
                failed, fence = self._fenced_rounds(token, start)
            else:
                result = self._redlock._set_nx(
                    (self._key,), (token,), self._ttl_ms, self._timeout_ms
                )[0]
                failed = self._refusal(result, result[1])
                fence = None
            if failed is None:
                self._took(token, start, fence)
                return True
        except BaseException:
            self._unlock_after_interrupt(token)
            raise
        self._redlock._release_tokens(
            ((self._key, token),), self._timeout_ms, after_failed_attempt=True
        )
        self._refused(failed)
        return False

    def _unlock_after_interrupt(self, token: bytes) -> None:
        """Sends the unlock for `token` to every master (one round, bounded by the per-master
        timeout), and forgets the lock if it was already taken. Best effort: a failure here is
        logged, and the interrupt that brought us here is what the caller sees."""
        if self._token == token:
            self._let_go()
        if self._redlock.closed:
            return  # nothing went out (a closed Redlock refuses every round), nor can it now
        try:
            self._redlock._release_tokens(((self._key, token),), self._timeout_ms)
        except Exception as exc:
            _log.warning("hiredlock: unlocking %r after an exception failed: %s", self._name, exc)

    def _refused(self, failed: RoundResult) -> None:
        """Keeps the votes of a failed attempt (the caller has unlocked every master)."""
        self._last_votes = self._redlock._votes(failed)
        self._last_codes = failed[0]

    def _took(self, token: bytes, start: int, fence: Optional[int]) -> None:
        """The lock is ours from `start` (before the first write of the winning round)."""
        with self._mutex:
            self._token = token
            self._lost = False
            if self._lost_event is not None:
                self._lost_event.clear()
            self._fence = fence
            self._extensions = 0
            self._valid_until_ns = start + int((self._ttl_ms - self._drift_ms) * 1_000_000)
            self._acquired_at_ns = start
            # the watchdog stops renewing once the owner thread has ended
            self._owner = threading.current_thread() if self._auto_renew else None
            self._acquisition += 1
            acquisition = self._acquisition
        self._last_votes = ()
        self._last_codes = None
        if self._registry_ref is None:
            self._redlock._holding(self, True)  # makes the weak reference, once
        else:
            self._redlock._held[id(self)] = self._registry_ref
        if self._auto_renew and not self._redlock._watchdog().watch(
            self, acquisition, start + self._renew_interval_ns()
        ):
            self._mark_lost(acquisition, "renewal cannot run: the Redlock is closed")

    def _refusal(self, result: RoundResult, elapsed_ns: int) -> Optional[RoundResult]:
        """None when `result` is a valid quorum (elapsed counted from the first round's start)."""
        if _algorithm.won(
            result[0], elapsed_ns, self._ttl_ms, self._drift_ms, self._redlock._quorum
        ):
            return None
        return result

    def _fenced_rounds(
        self, token: bytes, start: int
    ) -> tuple[Optional[RoundResult], Optional[int]]:
        """Acquire with a fence: (the failed round or None, the fence).

        Round 1 takes the lock and bumps the name's counter where it was taken; the fence is the
        largest counter of that quorum. Round 2 raises the counter on every master to the fence,
        so that every later quorum meets a master already past it: fences only ever grow.
        """
        redlock = self._redlock
        fence_key = _scripts.fence_key(self._key)
        ttl = str(self._ttl_ms).encode()
        first = redlock._script(
            _scripts.ACQUIRE_FENCED,
            2,
            ((self._key, fence_key, token, ttl),),
            self._timeout_ms,
            wait_all=False,
            want_values=True,
            honour_backoff=True,
        )[0]
        if self._refusal(first, first[1]) is not None:
            return first, None
        fence = max(value for code, value in zip(first[0], first[3]) if code == _OK)
        second = redlock._script(
            _scripts.RAISE_FENCE,
            1,
            ((fence_key, str(fence).encode()),),
            self._timeout_ms,
            wait_all=True,
        )[0]
        return self._refusal(second, time.monotonic_ns() - start), fence

    # -- release and extend ----------------------------------------------------------------------

    def release(self) -> None:
        """Unlocks every master. Raises LockLost if fewer than a quorum still held our token.

        An interrupt (Ctrl-C) in the middle still sends the unlock before it propagates. In a
        forked child, a lock its parent held is not held (NotHeld), and nothing is sent.
        """
        # Taken before letting go: an interrupt may come inside _let_go, after it forgot the
        # token (a signal handler runs at the next call into C), and the unlock must still go out.
        token = self._token
        redlock = self._redlock
        try:
            token, lost = self._let_go()
            # Redlock._release_tokens, without its frame (this is half of every lock cycle)
            result = redlock._script(_RELEASE, 1, ((self._key, token),), self._timeout_ms, True)[0]
        except NotHeld:
            raise  # nothing of ours to unlock (in a forked child: the parent's lock)
        except BaseException:
            if token is not None:  # interrupted: the unlock still goes out
                self._unlock_after_interrupt(token)
            raise
        if lost or result[0].count(_OK) < redlock._quorum:
            raise self._released(result, lost)

    def _let_go(self) -> tuple[bytes, bool]:
        """Forgets the token (no renewal follows); returns it and whether the lock was lost."""
        if self._generation != _fork._generation:
            self._this_process()
        with self._mutex:
            token = self._token
            if token is None:
                raise NotHeld(f"lock {self._name!r} is not held by this Lock object")
            lost = self._lost
            self._token = None
            self._lost = False
            self._fence = None
            self._valid_until_ns = 0
            self._acquisition += 1  # the watchdog drops this acquisition's renewals
        self._redlock._held.pop(id(self), None)  # Redlock._holding(self, False), inlined
        return token, lost

    def _released(self, result: RoundResult, lost: bool) -> Optional[LockLost]:
        """The error for a release round's result, or None when a quorum released."""
        if not lost and result[0].count(_OK) >= self._redlock._quorum:
            return None
        self._last_votes = self._redlock._votes(result)
        return LockLost(
            f"lock {self._name!r} was no longer held by a quorum when released", self._last_votes
        )

    def extend(self, ttl: Optional[Duration] = None) -> None:
        """Re-arms the lock for `ttl` seconds (default: its own ttl) from now, on every master.

        Counts only if a quorum extended and the new validity, measured from this call's start, is
        positive; otherwise the lock is marked lost and LockLost is raised. A key that has expired
        is never created again. With max_extensions, the extension past the cap raises
        TooManyExtensions (before any I/O).
        """
        timing = None if ttl is None else self._redlock._timing(ttl)
        if self._max_extensions is not None and self._extensions >= self._max_extensions:
            raise TooManyExtensions(
                f"lock {self._name!r} was extended {self._extensions} times already "
                f"(max_extensions={self._max_extensions})"
            )
        self._this_process()
        with self._mutex:
            if self._token is None or self._lost:
                raise NotHeld(f"lock {self._name!r} is not held by this Lock object")
            failed = self._extend_round(timing)
            if failed is None:
                self._extensions += 1
            else:
                self._lost = True
        if failed is not None:
            error = LockLost(
                f"lock {self._name!r} could not be extended on a quorum", self._last_votes
            )
            self._notify_lost()
            raise error

    def _extend_round(self, timing: Optional[tuple[int, float, float]]) -> Optional[RoundResult]:
        """One extend round, under the mutex: None when it counted (the validity is moved on),
        else the failed round (its votes are kept)."""
        ttl_ms, timeout_ms, drift = timing or (self._ttl_ms, self._timeout_ms, self._drift_ms)
        redlock = self._redlock
        start = time.monotonic_ns()
        # wait_all: every master that keeps up gets the new ttl (and the EVAL after a NOSCRIPT);
        # the validity still counts from this round's start.
        result = redlock._script(
            _scripts.EXTEND,
            1,
            ((self._key, self._token, str(ttl_ms).encode()),),
            timeout_ms,
            wait_all=True,
        )[0]
        if _algorithm.won(result[0], result[1], ttl_ms, drift, redlock.quorum):
            self._valid_until_ns = start + int((ttl_ms - drift) * 1_000_000)
            return None
        self._last_votes = redlock._votes(result)
        return result

    def _notify_lost(self) -> None:
        self.lost.set()
        if self._on_lost is not None:
            try:
                self._on_lost(self)
            except Exception:
                _log.exception("hiredlock: the on_lost callback of %r raised", self._name)

    def _mark_lost(self, acquisition: int, why: str) -> None:
        """Marks this acquisition lost (if it is still the current one) and tells the owner."""
        with self._mutex:
            if acquisition != self._acquisition or self._token is None:
                return
            self._lost = True
        _log.warning("hiredlock: lost %r: %s", self._name, why)
        self._notify_lost()

    # -- auto-renewal (called by the watchdog thread) ----------------------------------------------

    def _renew_interval_ns(self) -> int:
        return self._ttl_ms * 1_000_000 // 3

    def _renew(self, acquisition: int) -> Optional[int]:
        """Extends the lock if it is still this acquisition's; returns when to renew next.

        A failed renewal is retried while the validity left allows another round (see
        _algorithm.renewal_retry_ns); the lock is marked lost only when a majority said the key is
        not ours any more, or when no renewal can finish in time.
        """
        if self._generation != _fork._generation:
            return None  # a parent's watchdog entry: never renewed in a child
        with self._mutex:
            if acquisition != self._acquisition or self._token is None or self._lost:
                return None
            owner = self._owner
            if owner is not None and not owner.is_alive():
                _log.warning(
                    "hiredlock: the thread that acquired %r ended without releasing it; "
                    "it is no longer renewed and expires with its ttl",
                    self._name,
                )
                return None
            now = time.monotonic_ns()
            if self._max_hold_ns is not None and now - self._acquired_at_ns >= self._max_hold_ns:
                return None
            failed = self._extend_round(None)
            if failed is None:
                return now + self._renew_interval_ns()
            end = time.monotonic_ns()
            retry_at = _algorithm.renewal_retry_ns(
                failed[0], self._redlock.quorum, end, self._valid_until_ns, self._timeout_ms
            )
            if retry_at is not None:
                _log.info("hiredlock: renewing %r failed; retrying while it is valid", self._name)
                return retry_at
            self._lost = True
        _log.warning(
            "hiredlock: lost %r: could not be extended on a quorum [%s]",
            self._name,
            "; ".join(str(vote) for vote in self._last_votes),
        )
        self._notify_lost()
        return None

    def __repr__(self) -> str:
        state = "held" if self.held else ("lost" if self._lost else "unlocked")
        return f"<hiredlock.Lock {self._name!r} ttl={self.ttl:g}s {state}>"
