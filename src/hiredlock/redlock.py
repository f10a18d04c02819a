"""Redlock: the masters, the options, the engine pool, and the rounds every lock goes through."""

from __future__ import annotations

import functools
import inspect
import logging
import threading
import time
import weakref
from collections.abc import Iterable, Sequence
from typing import Any, Callable, NamedTuple, Optional, TypeVar, Union

from . import _algorithm, _backend, _config, _fork, _scripts
from ._config import Duration, MasterLike, MasterSpec
from ._contract import RoundResult
from ._errors import HiredlockError, LockLost, NotHeld, QuorumUnreachable, Vote
from ._pool import EnginePool
from ._scripts import Outcome
from ._watchdog import Watchdog
from .lock import Lock, new_token
from .rlock import RLock

_F = TypeVar("_F", bound=Callable[..., Any])
NameOrFactory = Union[str, bytes, Callable[..., Union[str, bytes]]]


class KeyState(NamedTuple):
    """What one master holds for a lock name (Redlock.inspect)."""

    master: str
    outcome: Outcome  # OK when the master answered; a failure outcome otherwise
    exists: Optional[bool]  # None when the master did not answer
    pttl_ms: Optional[int]  # ms left; -1: the key has no expiry; None: missing or no answer
    ours: Optional[bool]  # the key holds the token of a lock this Redlock holds
    detail: Optional[str] = None


_log = logging.getLogger("hiredlock")


class Redlock:
    """A client of N independent Redis masters; makes locks that need a majority of them.

    masters:        URLs (redis://[user:password@]host:port/db, unix:///path?db=N), dicts of
                    options (host, port, db, username, password, path) or redis-py clients
                    whose address can be read (not a Sentinel-managed one). Passwords never
                    show: not in errors, reprs, votes or logs (a URL shown reads user:***@).
    retry_count:    attempts in a row that may fail for lack of answering masters before acquire
                    raises QuorumUnreachable (a lock merely held by others is waited for instead).
    retry_delay:    seconds between attempts, randomised (x0.5 to x1.5) so rivals do not collide.
    drift_factor:   share of the ttl kept back for clock drift between this host and the masters.
    master_timeout: seconds to wait for each master per round; None: 5% of the ttl, 5 to 50 ms.
    backend:        "auto" (HIREDLOCK_IMPL, else native when it loads), "native" or "python".

    Every duration, here and in lock(), acquire() and extend(), is at most hiredlock.MAX_TTL
    (2**31 - 1 ms, about 24.8 days): a longer one is refused with ValueError when it is given.
    """

    def __init__(
        self,
        masters: Iterable[MasterLike],
        *,
        retry_count: int = 3,
        retry_delay: Duration = 0.2,
        drift_factor: float = _scripts.DEFAULT_DRIFT_FACTOR,
        master_timeout: Optional[Duration] = None,
        backend: str = "auto",
    ) -> None:
        engine_class = _backend.engine_class(backend)
        self._masters: tuple[MasterSpec, ...] = _config.parse_masters(masters)
        self._master_names = tuple(str(spec) for spec in self._masters)
        self._quorum = _scripts.quorum(len(self._masters))
        self._retry_count = _config.non_negative_int(retry_count, "retry_count")
        if self._retry_count < 1:
            raise ValueError("retry_count must be at least 1 (it counts attempts), got 0")
        self._retry_delay = _config.non_negative_seconds(retry_delay, "retry_delay")
        self._drift_factor = _config.drift_factor(drift_factor)
        self._master_timeout_ms = (
            None
            if master_timeout is None
            else _config.positive_duration_ms(master_timeout, "master_timeout")
        )
        self.backend: str = engine_class.name
        self._pool = EnginePool(lambda: engine_class(self._masters, self._quorum))
        self._state_mutex = threading.Lock()
        # The locks this Redlock holds: id -> a weak reference (each Lock makes its own once, see
        # _holding), so a held Lock its caller dropped is neither kept alive nor renewed (its
        # keys expire with their ttl). close() releases the others; inspect() recognises their
        # tokens. No mutex: single dict operations are atomic. (A plain dict of weakrefs, not a
        # WeakValueDictionary, whose Python-level __setitem__ cost a lock cycle a tenth.)
        self._held: dict[int, weakref.ref[Lock]] = {}
        self._timings: dict[tuple, tuple[int, float, float]] = {}
        self._renewer: Optional[Watchdog] = None
        self._closed = False
        self._generation = _fork._generation  # the process (see _fork) the state above is of

    # -- public ------------------------------------------------------------------------------

    @property
    def masters(self) -> tuple[MasterSpec, ...]:
        return self._masters

    @property
    def closed(self) -> bool:
        """True once close() was called: no lock can be acquired any more."""
        return self._closed

    @property
    def quorum(self) -> int:
        return self._quorum

    @property
    def retry_count(self) -> int:
        return self._retry_count

    @property
    def retry_delay(self) -> float:
        return self._retry_delay

    @property
    def drift_factor(self) -> float:
        return self._drift_factor

    def lock(
        self,
        name: str | bytes,
        ttl: Duration,
        *,
        blocking_timeout: Optional[Duration] = None,
        auto_renew: bool = False,
        max_hold: Optional[Duration] = None,
        on_lost: Optional[Callable[[Lock], Any]] = None,
        max_extensions: Optional[int] = None,
        fencing: bool = False,
    ) -> Lock:
        """A lock on `name` (the Redis key) held for `ttl` seconds at most. No I/O happens here.

        blocking_timeout: how long `with lock:` waits (None: until acquired).
        auto_renew:       extend at about ttl/3 from a background thread while held; on a failed
                          renewal `lock.lost` is set and `on_lost(lock)` is called.
        max_hold:         with auto_renew, stop renewing this long after the acquire.
        max_extensions:   extend() past this many times raises TooManyExtensions.
        fencing:          `lock.fence` is then larger than every earlier holder's fence.
        """
        return Lock(
            self,
            name,
            ttl,
            blocking_timeout=blocking_timeout,
            auto_renew=auto_renew,
            max_hold=max_hold,
            on_lost=on_lost,
            max_extensions=max_extensions,
            fencing=fencing,
        )

    def acquire_many(self, names: Iterable[str | bytes], ttl: Duration) -> list[Optional[Lock]]:
        """Tries to acquire every name at once: one round trip to each master for the batch.

        Each name is judged on its own (its own quorum and validity); the result has a Lock for
        each name acquired and None for each name that was not (those are unlocked everywhere
        in one more round). One attempt, no retries. Raises QuorumUnreachable when the masters
        failed so that no name could have been acquired.
        """
        if isinstance(names, (str, bytes, bytearray, memoryview)):
            raise TypeError(
                f"names must be an iterable of names, not a single {type(names).__name__}"
            )
        self._timing(ttl)  # a bad ttl is refused even for an empty batch
        locks = [Lock(self, name, ttl) for name in names]
        if not locks:
            return []
        keys = [lock.key for lock in locks]
        if len(set(keys)) != len(keys):
            raise ValueError("names must not repeat in one batch")
        first = locks[0]
        tokens = [new_token() for _ in locks]
        start = time.monotonic_ns()
        results = self._set_nx(keys, tokens, first._ttl_ms, first._timeout_ms)
        out: list[Optional[Lock]] = []
        unlock: list[tuple[bytes, bytes]] = []
        unreachable = 0
        for lock, token, result in zip(locks, tokens, results):
            failed = lock._refusal(result, result[1])
            if failed is None:
                lock._took(token, start, None)
                out.append(lock)
                continue
            lock._refused(failed)
            unlock.append((lock.key, token))
            unreachable += _algorithm.quorum_unreachable(result[0], self._quorum)
            out.append(None)
        if unlock:
            self._release_tokens(unlock, first._timeout_ms, after_failed_attempt=True)
        if unreachable == len(locks):
            raise QuorumUnreachable(
                f"too many masters failed to answer ({self._quorum} of "
                f"{len(self._masters)} needed) for any of {len(locks)} names",
                locks[0].last_votes,
            )
        return out

    def release_many(self, locks: Iterable[Lock]) -> None:
        """Releases every lock in one round trip to each master.

        Raises LockLost after the round if some lock was no longer held by a quorum (naming them
        all; the votes are the first one's); the others are released all the same.
        """
        batch = [lock for lock in locks]
        if not batch:
            return
        # Every lock is checked before any lets go: a bad entry must not leave the ones before
        # it forgotten by their Lock objects while their keys stay on the masters.
        for lock in batch:
            if not isinstance(lock, Lock) or lock._redlock is not self:
                raise ValueError("release_many takes Locks of this Redlock")
            if lock._token is None:
                raise NotHeld(f"lock {lock.name!r} is not held by this Lock object")
        if len({id(lock) for lock in batch}) != len(batch):
            raise ValueError("a lock must not repeat in one batch")
        let_go = [lock._let_go() for lock in batch]
        timeout_ms = max(lock._timeout_ms for lock in batch)
        results = self._release_tokens(
            [(lock.key, token) for lock, (token, _lost) in zip(batch, let_go)], timeout_ms
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

    def rlock(self, name: str | bytes, ttl: Duration, **options: Any) -> RLock:
        """A reentrant lock: its owning thread may acquire it again (same options as lock())."""
        return RLock(self, name, ttl, **options)

    def synchronized(
        self,
        name: NameOrFactory,
        ttl: Duration,
        *,
        blocking_timeout: Optional[Duration] = None,
        auto_renew: bool = False,
        **options: Any,
    ) -> Callable[[_F], _F]:
        """Decorator: the function runs only while holding the lock `name`.

        Coroutine, generator and async generator functions are refused (TypeError): their body
        runs after the call returns, when this lock would be released already.

        `name` may be a callable taking the function's arguments and returning the lock name,
        e.g. `lambda order_id: f"order:{order_id}"`. The lock is released when the function
        returns or raises; LockNotAcquired is raised if it cannot be had within blocking_timeout.
        """
        make = functools.partial(
            self.lock,
            ttl=ttl,
            blocking_timeout=blocking_timeout,
            auto_renew=auto_renew,
            **options,
        )
        if callable(name):
            make("checking the options")  # bad options fail at decoration, not at the first call
        else:
            make(name)

        def decorate(func: _F) -> _F:
            _refuse_lazy_bodies(func)

            @functools.wraps(func)
            def locked_call(*args: Any, **kwargs: Any) -> Any:
                with make(name(*args, **kwargs) if callable(name) else name):
                    return func(*args, **kwargs)

            return locked_call  # type: ignore[return-value]

        return decorate

    def delete_fence_counter(self, name: str | bytes) -> None:
        """Deletes the fencing counter of `name` on every master (one small key each, kept
        without a ttl so that fences only grow). Call it when the resource is retired: a fenced
        lock taken on `name` afterwards starts counting again from 1. Refused while this Redlock
        holds the lock; raises QuorumUnreachable if fewer than a quorum answered.
        """
        key = _config.lock_name(name)
        if self._token_held_for(key):
            raise HiredlockError(f"lock {name!r} is held by this Redlock: release it first")
        timeout_ms = self.master_timeout_ms(_scripts.MAX_TTL_MS)
        result = self._script(
            _scripts.DELETE_KEY, 1, ((_scripts.fence_key(key),),), timeout_ms, wait_all=True
        )[0]
        answered = len(result[0]) - sum(result[0].count(code) for code in _scripts.FAILURES)
        if answered < self._quorum:
            raise QuorumUnreachable(
                f"the fence counter of {name!r} could not be deleted on a quorum",
                self._votes(result),
            )

    def locked(self, name: str | bytes) -> bool:
        """True if a majority of the masters hold a key for `name` (anyone's lock)."""
        answered = [state for state in self.inspect(name) if state.exists]
        return len(answered) >= self._quorum

    def inspect(self, name: str | bytes) -> list[KeyState]:
        """Asks every master what it holds for `name`: exists, PTTL, and whether it is ours."""
        key = _config.lock_name(name)
        token = self._token_held_for(key)
        result = self._script(
            _scripts.INSPECT,
            1,
            ((key, token),),
            self.master_timeout_ms(_scripts.MAX_TTL_MS),
            wait_all=True,
            want_values=True,
        )[0]
        states = []
        for vote, value in zip(self._votes(result), result[3]):
            if vote.outcome in (Outcome.OK, Outcome.TAKEN):
                exists, pttl, ours = _scripts.unpack_inspect(value)
                states.append(KeyState(vote.master, Outcome.OK, exists, pttl, ours))
            else:
                states.append(KeyState(vote.master, vote.outcome, None, None, None, vote.detail))
        return states

    def master_timeout_ms(self, ttl_ms: float) -> float:
        """The per-master wait of one round for a lock of this ttl."""
        if self._master_timeout_ms is not None:
            return self._master_timeout_ms
        return _algorithm.default_master_timeout_ms(ttl_ms)

    def close(self) -> None:
        """Stops auto-renewal, releases the locks it still holds, and closes every connection.

        The watchdog thread has ended when close() returns. Releasing is best effort: a lock
        whose release fails stays on the masters until its ttl.
        """
        self._this_process()
        with self._state_mutex:
            if self._closed:
                return
            self._closed = True
            renewer, self._renewer = self._renewer, None
            held = self._held_locks()
        if renewer is not None:
            renewer.close()
        for lock in held:
            try:
                lock.release()
            except Exception as exc:  # closing must not fail half-way
                _log.warning("hiredlock: releasing %r on close failed: %s", lock.name, exc)
        self._pool.close()

    def __enter__(self) -> Redlock:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Redlock({list(self._master_names)!r}, backend={self.backend!r})"

    # -- rounds, for Lock --------------------------------------------------------------------

    def _set_nx(
        self, keys: Sequence[bytes], tokens: Sequence[bytes], ttl_ms: int, timeout_ms: float
    ) -> list[RoundResult]:
        engine = self._pool.checkout()
        try:
            return engine.set_nx(keys, tokens, ttl_ms, timeout_ms)
        finally:
            self._pool.checkin(engine)

    def _script(
        self,
        script: _scripts.Script,
        numkeys: int,
        argvs: Sequence[tuple[bytes, ...]],
        timeout_ms: float,
        wait_all: bool,
        want_values: bool = False,
        honour_backoff: bool = False,
    ) -> list[RoundResult]:
        engine = self._pool.checkout()
        try:
            return engine.run_script(
                script.sha,
                script.source,
                numkeys,
                argvs,
                timeout_ms,
                wait_all,
                want_values,
                honour_backoff,
            )
        finally:
            self._pool.checkin(engine)

    def _release_tokens(
        self,
        pairs: Sequence[tuple[bytes, bytes]],
        timeout_ms: float,
        after_failed_attempt: bool = False,
    ) -> list[RoundResult]:
        """The release script for (key, token) pairs on every master, waiting for all of them.

        After a failed attempt, masters that just failed before anything was written to them
        (connect refused or timed out) are not retried: nothing of that attempt reached them,
        and a dead majority then costs one timeout per attempt. Every other master is sent the
        release, those that did not answer too. A user's release tries every master.
        """
        return self._script(
            _scripts.RELEASE,
            1,
            pairs,
            timeout_ms,
            wait_all=True,
            honour_backoff=after_failed_attempt,
        )

    def _holding(self, lock: Lock, held: bool) -> None:
        """Keeps the locks this Redlock holds (for inspect and close)."""
        key = id(lock)
        if not held:
            self._held.pop(key, None)
            return
        ref = lock._registry_ref
        if ref is None:
            registry = self._held

            def forget(dead: weakref.ref, key: int = key) -> None:
                # The Lock was dropped while held. Its id may already name a new Lock: only
                # this reference's own entry goes.
                if registry.get(key) is dead:
                    registry.pop(key, None)

            ref = lock._registry_ref = weakref.ref(lock, forget)
        self._held[key] = ref

    def _held_locks(self) -> list[Lock]:
        return [lock for ref in list(self._held.values()) if (lock := ref()) is not None]

    def _token_held_for(self, key: bytes) -> bytes:
        for lock in self._held_locks():
            token = lock.token
            if lock.key == key and token is not None:
                return token.encode()
        return b""

    def _timing(self, ttl: Any) -> tuple[int, float, float]:
        """ttl in ms, per-master timeout and drift; refuses a ttl that could never be valid.

        Cached by value (and type: True is not 1 here), as lock loops reuse a few ttls.
        """
        cache_key = (type(ttl), ttl)
        try:
            return self._timings[cache_key]
        except (KeyError, TypeError):  # TypeError: not hashable, validated below
            pass
        ttl_ms = _config.ttl_ms(ttl, "ttl")
        timeout_ms = self.master_timeout_ms(ttl_ms)
        drift = _algorithm.drift_ms(ttl_ms, self._drift_factor)
        if _algorithm.validity_ms(ttl_ms, timeout_ms, self._drift_factor) <= 0:
            raise ValueError(
                f"ttl of {ttl_ms} ms is too short: the per-master timeout ({timeout_ms:g} ms) "
                f"and the clock drift allowance ({drift:g} ms) would leave no validity"
            )
        if len(self._timings) >= 64:
            self._timings.clear()
        self._timings[cache_key] = timing = (ttl_ms, timeout_ms, drift)
        return timing

    def _this_process(self) -> None:
        """In a forked child: the parent's held locks are not ours to release or renew, and the
        parent's watchdog (whose thread does not exist here) and mutex are replaced."""
        if self._generation == _fork._generation:
            return
        self._state_mutex = threading.Lock()
        self._held = {}
        self._renewer = None
        self._generation = _fork._generation

    def _watchdog(self) -> Watchdog:
        self._this_process()
        with self._state_mutex:
            if self._renewer is None and not self._closed:
                self._renewer = Watchdog(hex(id(self)))
            return self._renewer or _CLOSED_WATCHDOG

    def _votes(self, result: RoundResult) -> tuple[Vote, ...]:
        codes, details = result[0], result[2]
        details = details or {}
        return tuple(
            Vote(name, Outcome(code), details.get(index))
            for index, (name, code) in enumerate(zip(self._master_names, codes))
        )


def _refuse_lazy_bodies(func: Callable[..., Any]) -> None:
    """A call to these returns an object whose body runs later, unlocked: refuse them."""
    for kind, test in (
        ("coroutine function", inspect.iscoroutinefunction),
        ("async generator function", inspect.isasyncgenfunction),
        ("generator function", inspect.isgeneratorfunction),
    ):
        if test(func):
            raise TypeError(
                f"synchronized cannot wrap {getattr(func, '__qualname__', func)!r}: it is a "
                f"{kind}, whose body would run after the lock is released"
            )


_CLOSED_WATCHDOG = Watchdog("closed")
_CLOSED_WATCHDOG.close()  # watch() on a closed watchdog does nothing: locks taken after close()
