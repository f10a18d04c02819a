"""AsyncRedlock: a client of N masters for asyncio; its locks share its connections."""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Iterable
from typing import Any, Callable, Literal, Optional, TypeVar, overload

from .._core import batches as _batches
from .._core import lock_batches as _lock_batches
from .._core import lock_steps as _lock_steps
from .._core import options as _options
from .._core import validation as _validation
from .._core.batches import KeyState, Removed
from .._core.client import ClientBase, NameOrFactory
from .._core.compat import Self, Unpack
from .._core.errors import Vote
from .._core.options import AdoptingOptions, LockCallOptions, LockMakerOptions, LockOptions
from .._core.validation import Duration
from ._fairlock import AsyncFairLock
from ._flavour import ASYNCIO
from ._lock import AsyncLock, AsyncRLock, new_async_lock
from ._multilock import AsyncMultiLock
from ._rounds import AsyncRounds
from ._rwlock import AsyncRWLock
from ._semaphore import AsyncSemaphore

_F = TypeVar("_F", bound=Callable[..., Any])


class AsyncRedlock(ClientBase):
    """A client of N independent Redis masters for asyncio; makes locks that need a majority.

    The options are Redlock's. All tasks of the event loop it is used in share its connection per
    master: the rounds asked for while a batch is in flight go out together when it ends, one
    write per master. It starts no thread of its own. Use one AsyncRedlock per event loop, and
    close it with `await aclose()` (or `async with AsyncRedlock(...) as redlock:`).
    """

    _flavour = ASYNCIO

    @property
    def _rounds(self) -> AsyncRounds:
        return self.session.rounds  # type: ignore[no-any-return]

    @overload
    def lock(
        self,
        name: str | bytes,
        ttl: Duration,
        *,
        fair: Literal[False] = False,
        **options: Unpack[AdoptingOptions[AsyncLock]],
    ) -> AsyncLock: ...

    @overload
    def lock(
        self,
        name: str | bytes,
        ttl: Duration,
        *,
        fair: Literal[True],
        **options: Unpack[AdoptingOptions[AsyncLock]],
    ) -> AsyncFairLock: ...

    @overload
    def lock(
        self,
        name: str | bytes,
        ttl: Duration,
        *,
        fair: bool,
        **options: Unpack[AdoptingOptions[AsyncLock]],
    ) -> AsyncLock: ...

    def lock(
        self, name: str | bytes, ttl: Duration, **options: Unpack[LockCallOptions[AsyncLock]]
    ) -> AsyncLock:
        """As Redlock.lock(); auto_renew renews from a task of this loop, and on_lost may be a
        plain function (run in the loop: it must not block) or a coroutine function (run as a
        task of its own)."""
        if not options:  # (the usual call: `async with redlock.lock(name, ttl):`)
            return new_async_lock(self, name, ttl)
        _options.check("AsyncRedlock.lock", options, LockCallOptions)
        fair = options.pop("fair", False)
        fair = fair if fair is False else _validation.flag(fair, "fair")
        lock_options: AdoptingOptions[AsyncLock] = options
        return (AsyncFairLock if fair else AsyncLock)(self, name, ttl, **lock_options)

    def multilock(
        self,
        names: Iterable[str | bytes],
        ttl: Duration,
        **options: Unpack[LockOptions[AsyncMultiLock]],
    ) -> AsyncMultiLock:
        """As Redlock.multilock, for asyncio: an AsyncMultiLock (`await acquire()`, `async
        with`): one lock over several names, taken only if all of them are."""
        _options.check("AsyncRedlock.multilock", options, LockOptions)
        return AsyncMultiLock(self, names, ttl, **options)

    def semaphore(
        self,
        name: str | bytes,
        permits: int,
        ttl: Duration,
        **options: Unpack[LockOptions[AsyncLock]],
    ) -> AsyncSemaphore:
        """As Redlock.semaphore, for asyncio: an AsyncSemaphore whose permits are AsyncPermits."""
        _options.check("AsyncRedlock.semaphore", options, LockOptions)
        return AsyncSemaphore(self, name, permits, ttl, **options)

    def rwlock(
        self, name: str | bytes, ttl: Duration, **options: Unpack[LockOptions[AsyncLock]]
    ) -> AsyncRWLock:
        """As Redlock.rwlock, for asyncio: read() and write() make AsyncLocks of each side."""
        _options.check("AsyncRedlock.rwlock", options, LockOptions)
        return AsyncRWLock(self, name, ttl, **options)

    def rlock(
        self, name: str | bytes, ttl: Duration, **options: Unpack[LockOptions[AsyncLock]]
    ) -> AsyncRLock:
        """A reentrant lock: the task that owns it may acquire it again (options as lock())."""
        _options.check("AsyncRedlock.rlock", options, LockOptions)
        return AsyncRLock(self, name, ttl, **options)

    async def acquire_many(
        self, names: Iterable[str | bytes], ttl: Duration
    ) -> list[Optional[AsyncLock]]:
        """As Redlock.acquire_many: one attempt at every name, one round trip per master."""
        _batches.check_names(names)
        self.session.timing(ttl)  # a bad ttl is refused even for an empty batch
        locks = [AsyncLock(self, name, ttl) for name in names]
        acquired: list[Optional[AsyncLock]] = await self._rounds.run(
            _lock_batches.acquire_many_steps(self.session, locks)
        )
        return acquired

    async def release_many(self, locks: Iterable[AsyncLock]) -> None:
        """As Redlock.release_many: every lock in one round trip per master."""
        steps = _lock_batches.release_many_steps(
            self.session, "AsyncRedlock", AsyncLock, list(locks)
        )
        await self._rounds.run(steps)

    async def connect(self) -> tuple[Vote, ...]:
        """As Redlock.connect: opens every master's connection now; each master's vote."""
        votes: tuple[Vote, ...] = await self._rounds.run(_batches.connect_steps(self.session))
        return votes

    async def locked(self, name: str | bytes) -> bool:
        """True if a majority of the masters hold a key for `name` (anyone's lock)."""
        return _batches.locked(self.session, await self.inspect(name))

    async def inspect(self, name: str | bytes) -> list[KeyState]:
        """Asks every master what it holds for `name`: exists, PTTL, and whether it is ours."""
        states: list[KeyState] = await self._rounds.run(_batches.inspect_steps(self.session, name))
        return states

    async def force_release(self, name: str | bytes) -> list[Removed]:
        """As Redlock.force_release: removes every key of `name` on every master, whoever holds
        it (its fence counter stays); what each master removed."""
        report: list[Removed] = await self._rounds.run(
            _batches.force_release_steps(self.session, name)
        )
        return report

    async def delete_fence_counter(self, name: str | bytes) -> None:
        """As Redlock.delete_fence_counter."""
        await self._rounds.run(_batches.delete_fence_counter_steps(self.session, name))

    def synchronized(
        self,
        name: NameOrFactory,
        ttl: Duration,
        **options: Unpack[LockMakerOptions[AsyncLock]],
    ) -> Callable[[_F], _F]:
        """Decorator for coroutine functions: the body runs only while holding the lock `name`
        (a name, or a callable taking the function's arguments and returning one). Plain
        functions are refused (TypeError): use Redlock.synchronized for them."""
        _options.check("AsyncRedlock.synchronized", options, LockMakerOptions)
        make = self._lock_factory(self.lock, name, ttl, options)

        def decorate(func: _F) -> _F:
            if not inspect.iscoroutinefunction(func):
                raise TypeError(
                    f"AsyncRedlock.synchronized wraps coroutine functions; "
                    f"{getattr(func, '__qualname__', func)!r} is not one"
                )

            @functools.wraps(func)
            async def locked_call(*args: Any, **kwargs: Any) -> Any:
                async with make(args, kwargs):
                    return await func(*args, **kwargs)

            return locked_call  # type: ignore[return-value]

        return decorate

    async def aclose(self) -> None:
        """Stops auto-renewal, lets the rounds in flight end, releases the locks still held, and
        closes every connection. Releasing is best effort: a lock whose release fails stays on
        the masters until its ttl, and is logged as a warning, unless its loss was told already
        (extend() raised LockLost, or its renewal failed)."""
        session = self.session
        if not session.close():  # (no acquire wins from here on; the waits between attempts
            return  # and for release notices end)
        rounds = self._rounds
        rounds.wake_all()
        await rounds.stop_tasks()
        # The locks held now are all the client will ever hold (an acquire in flight that wins
        # from here on unlocks what it won and raises): released first, then the acquires in
        # flight are let end (within a round or two).
        held = session.held_locks()
        told = [_lock_steps.loss_told(lock) for lock in held]
        for lock, was_told, outcome in zip(
            held, told, await _gather_settled(rounds.run(lock._close_steps()) for lock in held)
        ):
            if isinstance(outcome, Exception):
                _lock_steps.close_release_failed(lock, was_told, outcome)
        settled: asyncio.Future[None] = rounds.loop().create_future()

        def on_settled() -> None:
            if not settled.done():
                settled.set_result(None)

        session.when_settled(on_settled)
        await settled
        await rounds.drain()
        await rounds.flush()
        session.close_rounds()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.aclose()


async def _gather_settled(coroutines: Iterable[Any]) -> list[Any]:
    return await asyncio.gather(*coroutines, return_exceptions=True)
