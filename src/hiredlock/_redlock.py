"""Redlock: the masters, the options, the engine pool, and the rounds every lock goes through."""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Iterable
from typing import Any, Callable, Literal, Optional, TypeVar, overload

from ._core import batches as _batches
from ._core import lock_batches as _lock_batches
from ._core import lock_steps as _lock_steps
from ._core import options as _options
from ._core import validation as _validation
from ._core.batches import KeyState, Removed
from ._core.client import ClientBase, NameOrFactory
from ._core.compat import Self, Unpack
from ._core.errors import Vote
from ._core.options import AdoptingOptions, LockCallOptions, LockMakerOptions, LockOptions
from ._core.validation import Duration
from ._fairlock import FairLock
from ._lock import Lock, new_lock
from ._multilock import MultiLock
from ._rlock import RLock
from ._rwlock import RWLock
from ._semaphore import Semaphore
from ._sync.flavour import BLOCKING

__all__ = ["KeyState", "Redlock", "Removed"]

_F = TypeVar("_F", bound=Callable[..., Any])

_log = logging.getLogger("hiredlock.close")

# How long close() waits for the acquires under way in other threads to end (each ends within a
# round or two, bounded by the master timeout); past that it goes on closing.
CLOSE_SETTLE_S = 30.0


class Redlock(ClientBase):
    """A client of N independent Redis masters; makes locks that need a majority of them.

    masters:        URLs (redis://[user:password@]host:port/db, rediss://... for TLS,
                    unix:///path?db=N, redis+sentinel://[user:password@]host:port[,host:port
                    ...]/service_name/db for a Sentinel-managed master, rediss+sentinel://...
                    with TLS), dicts of options (host, port, db, username, password, path,
                    the TLS options, or sentinels and service_name) or redis-py clients whose
                    address can be read (Sentinel-managed ones included: Sentinel.master_for).
                    Passwords never show: not in errors, reprs, votes or logs (a URL shown
                    reads user:***@).
    retry_count:    attempts in a row that may fail for lack of answering masters before acquire
                    raises QuorumUnreachable (a lock merely held by others is waited for instead).
    retry_delay:    seconds between attempts, randomised (x0.5 to x1.5) so rivals do not collide.
    drift_factor:   share of the ttl kept back for clock drift between this host and the masters.
    master_timeout: seconds to wait for each master per round; None: 5% of the ttl, 5 to 50 ms.
    backend:        "auto" (HIREDLOCK_IMPL, else native when it loads), "native" or "python".
    wake:           waiters are woken when the lock they wait for is released (a notice from
                    the masters, see docs/waiting.md) instead of only by the retry_delay timer;
                    False: the timer only. Each lock may say otherwise (lock(..., wake=)).
    on_event:       a plain function called with a hiredlock.Event for each thing a lock of this
                    client did (acquired, acquire_failed, released, extended, renewed,
                    renewal_retried, lost, degraded), in the thread that did it: it must not
                    block. One that raises is logged once and never breaks a lock.
    namespace:      a prefix (str or bytes) for every key and channel this client writes or
                    reads, so that an ACL can grant just it (~billing:* &billing:*); a "{" in it
                    must open a whole hash tag ("{app}:"). See docs/concepts.md, Namespaces.

    Every duration, here and in lock(), acquire() and extend(), is at most hiredlock.MAX_TTL
    (2**31 - 1 ms, about 24.8 days): a longer one is refused with ValueError when it is given.
    """

    _flavour = BLOCKING

    @overload
    def lock(
        self,
        name: str | bytes,
        ttl: Duration,
        *,
        fair: Literal[False] = False,
        **options: Unpack[AdoptingOptions[Lock]],
    ) -> Lock: ...

    @overload
    def lock(
        self,
        name: str | bytes,
        ttl: Duration,
        *,
        fair: Literal[True],
        **options: Unpack[AdoptingOptions[Lock]],
    ) -> FairLock: ...

    @overload
    def lock(
        self,
        name: str | bytes,
        ttl: Duration,
        *,
        fair: bool,
        **options: Unpack[AdoptingOptions[Lock]],
    ) -> Lock: ...

    def lock(
        self, name: str | bytes, ttl: Duration, **options: Unpack[LockCallOptions[Lock]]
    ) -> Lock:
        """A lock on `name` (the Redis key) held for `ttl` seconds at most. No I/O happens here.

        blocking_timeout: how long `with lock:` waits (None: until acquired).
        auto_renew:       extend at about ttl/3 from a background thread while held; on a failed
                          renewal `lock.lost` is set and `on_lost(lock)` is called (on a
                          thread of its own: a slow callback delays no renewal).
        max_hold:         with auto_renew, stop renewing this long after the acquire.
        max_extensions:   extend() past this many times raises TooManyExtensions (auto-renewals
                          are not counted).
        fencing:          `lock.fence` is then larger than every earlier holder's fence.
        wake:             woken by release notices while waiting (None: this Redlock's `wake`).
        fair:             a FairLock: blocking acquires are granted in the order they were made.
        """
        if not options:  # (the usual call: `with redlock.lock(name, ttl):`)
            return new_lock(self, name, ttl)
        _options.check("Redlock.lock", options, LockCallOptions)
        fair = options.pop("fair", False)
        fair = fair if fair is False else _validation.flag(fair, "fair")
        lock_options: AdoptingOptions[Lock] = options
        return (FairLock if fair else Lock)(self, name, ttl, **lock_options)

    def acquire_many(self, names: Iterable[str | bytes], ttl: Duration) -> list[Optional[Lock]]:
        """Tries to acquire every name at once: one round trip to each master for the batch.

        Each name is judged on its own (its own quorum and validity); the result has a Lock for
        each name acquired and None for each name that was not (those are unlocked everywhere
        in one more round). One attempt, no retries. Raises QuorumUnreachable when the masters
        failed so that no name could have been acquired.
        """
        _batches.check_names(names)
        self.session.timing(ttl)  # a bad ttl is refused even for an empty batch
        locks = [Lock(self, name, ttl) for name in names]
        pin = _lock_batches.share_pin(locks)
        steps = _lock_batches.acquire_many_steps(self.session, locks)
        try:
            acquired: list[Optional[Lock]] = self.session.rounds.run(steps, pin)
            return acquired
        except BaseException:
            # An interrupt once the steps were over (a signal handler runs as the driver
            # returns): the names they took are given back.
            self.session.rounds.run(_lock_batches.give_back_many_steps(locks), pin)
            raise

    def release_many(self, locks: Iterable[Lock]) -> None:
        """Releases every lock in one round trip to each master.

        Raises LockLost after the round if some lock was no longer held by a quorum (naming them
        all; the votes are the first one's); the others are released all the same.
        """
        batch = list(locks)
        steps = _lock_batches.release_many_steps(self.session, "Redlock", Lock, batch)
        self.session.rounds.run(steps, _lock_batches.pin_of(batch))

    def multilock(
        self,
        names: Iterable[str | bytes],
        ttl: Duration,
        **options: Unpack[LockOptions[MultiLock]],
    ) -> MultiLock:
        """One lock over several names, taken only if all of them are: held when a quorum of
        masters holds every name (one round per attempt; the validity counted once, from the
        attempt's start), released together in one round. Options as lock()'s (retries,
        blocking_timeout, `with`, auto_renew: every name extended in one round, lost when a
        quorum no longer holds them all; release notices: a release of any name wakes a
        waiter), but not fencing. Names are checked here (1 to 1,000 valid names, none twice):
        no I/O happens here. Two multilocks sharing names never deadlock, in any order.
        """
        _options.check("Redlock.multilock", options, LockOptions)
        return MultiLock(self, names, ttl, **options)

    def semaphore(
        self, name: str | bytes, permits: int, ttl: Duration, **options: Unpack[LockOptions[Lock]]
    ) -> Semaphore:
        """A semaphore: at most `permits` holders of `name` at a time, across every client.

        Each permit is a lock on a key of its own (`hiredlock:permit:<i>:<name>`), held for `ttl`
        seconds at most, so a holder that died gives its permit back when its ttl runs out.
        acquire() tries every permit at once and keeps the first a quorum granted. Options as
        lock()'s (blocking_timeout, auto_renew, max_hold, on_lost, max_extensions), per permit;
        fencing is refused (a fence orders the holders of one name, permits are held side by
        side). No I/O happens here.
        """
        _options.check("Redlock.semaphore", options, LockOptions)
        return Semaphore(self, name, permits, ttl, **options)

    def rwlock(
        self, name: str | bytes, ttl: Duration, **options: Unpack[LockOptions[Lock]]
    ) -> RWLock:
        """A read-write lock: `rw.read()` and `rw.write()` make lock objects for many readers or
        one writer of `name` (writers preferred: a waiting writer holds back new readers, and
        readers that waited for a writer go before the next one). Options as lock()'s, per
        holder; fencing is refused. No I/O happens here."""
        _options.check("Redlock.rwlock", options, LockOptions)
        return RWLock(self, name, ttl, **options)

    def rlock(
        self, name: str | bytes, ttl: Duration, **options: Unpack[LockOptions[Lock]]
    ) -> RLock:
        """A reentrant lock: its owning thread may acquire it again (same options as lock())."""
        _options.check("Redlock.rlock", options, LockOptions)
        return RLock(self, name, ttl, **options)

    def synchronized(
        self,
        name: NameOrFactory,
        ttl: Duration,
        **options: Unpack[LockMakerOptions[Lock]],
    ) -> Callable[[_F], _F]:
        """Decorator: the function runs only while holding the lock `name`.

        Coroutine, generator and async generator functions are refused (TypeError): their body
        runs after the call returns, when this lock would be released already.

        `name` may be a callable taking the function's arguments and returning the lock name,
        e.g. `lambda order_id: f"order:{order_id}"`. The lock is released when the function
        returns or raises; LockNotAcquired is raised if it cannot be had within blocking_timeout.
        """
        _options.check("Redlock.synchronized", options, LockMakerOptions)
        make = self._lock_factory(self.lock, name, ttl, options)

        def decorate(func: _F) -> _F:
            _refuse_lazy_bodies(func)

            @functools.wraps(func)
            def locked_call(*args: Any, **kwargs: Any) -> Any:
                with make(args, kwargs):
                    return func(*args, **kwargs)

            return locked_call  # type: ignore[return-value]

        return decorate

    def force_release(self, name: str | bytes) -> list[Removed]:
        """An operator's tool: removes every key of `name` on every master, whoever holds it:
        its lock's (or fair lock's) key and queue, its read-write lock's keys, its semaphore's
        permits, and announces the release to waiters. Its fence counter stays (fences must only
        grow; delete_fence_counter removes it). Returns what each master removed (a Removed
        each: its outcome, and key -> how many keys went; a master that failed removed nothing,
        check `outcome`). The holders find out at their next extend, renewal or release
        (LockLost). Refused while this Redlock holds the lock."""
        report: list[Removed] = self.session.rounds.run(
            _batches.force_release_steps(self.session, name)
        )
        return report

    def delete_fence_counter(self, name: str | bytes) -> None:
        """Deletes the fencing counter of `name` on every master (one small key each, kept
        without a ttl so that fences only grow). Call it when the resource is retired: a fenced
        lock taken on `name` afterwards starts counting again from 1. Refused while this Redlock
        holds the lock; raises QuorumUnreachable if fewer than a quorum answered.
        """
        self.session.rounds.run(_batches.delete_fence_counter_steps(self.session, name))

    def connect(self) -> tuple[Vote, ...]:
        """Opens every master's connection now (TCP, TLS handshake, AUTH/SELECT), in one round
        that waits for each, instead of in the first acquire's round: a round ends once a quorum
        decided, and a master whose connection completes after that gets nothing from it, so the
        first lock of a fresh client may be held by a bare quorum. Returns each master's vote (OK:
        connected); raises nothing for masters that failed. Optional: every round connects what
        it needs. With threads, each thread's first round uses an engine of its own."""
        votes: tuple[Vote, ...] = self.session.rounds.run(_batches.connect_steps(self.session))
        return votes

    def locked(self, name: str | bytes) -> bool:
        """True if a majority of the masters hold a key for `name` (anyone's lock)."""
        return _batches.locked(self.session, self.inspect(name))

    def inspect(self, name: str | bytes) -> list[KeyState]:
        """Asks every master what it holds for `name`: exists, PTTL, and whether it is ours."""
        steps = _batches.inspect_steps(self.session, name)
        states: list[KeyState] = self.session.rounds.run(steps)
        return states

    def close(self) -> None:
        """Stops auto-renewal, releases the locks it still holds, and closes every connection.

        The watchdog thread has ended when close() returns. Releasing is best effort: a lock
        whose release fails stays on the masters until its ttl, and is logged as a warning,
        unless its loss was told already (extend() raised LockLost, or its renewal failed).
        """
        session = self.session
        if not session.close():  # (no acquire wins from here on; the waits between attempts
            return  # and for release notices end)
        session.renewals.stop()
        # The locks held now are all the client will ever hold (an acquire in flight that wins
        # from here on unlocks what it won and raises): released first, then the acquires in
        # flight in other threads are let end (within a round or two).
        for lock in session.held_locks():
            told = _lock_steps.loss_told(lock)
            try:
                session.rounds.run(lock._close_steps(), lock._pin)
            except Exception as exc:  # closing must not fail half-way
                _lock_steps.close_release_failed(lock, told, exc)
        if not session.wait_settled(CLOSE_SETTLE_S):
            _log.warning("hiredlock: acquires under way after %g s of close()", CLOSE_SETTLE_S)
        session.close_rounds()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


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
