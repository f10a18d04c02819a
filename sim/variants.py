"""Deliberately broken variants of the algorithm, each ONE rule of the library undone by patching
its own function in this process, for the simulator to catch (tests/sim/ checks that it does).

A method of a class that runs compiled (an extension type: see hiredlock/_compiled.py) cannot be
replaced on that class: it is replaced on each Python class below it instead (Lock, AsyncLock, the
other kinds), which is where every lock object's lookup finds it first."""

from __future__ import annotations

from collections.abc import Generator, Iterator
from contextlib import contextmanager
from typing import Any, Callable, Optional

from hiredlock._core import clock as _clock
from hiredlock._core import judgement, lock_state, lock_steps, scripts
from hiredlock._core.fairlocks import FairBase
from hiredlock._core.requests import RunScript, script

_saved: list[tuple[Any, str, Any]] = []
_ABSENT = object()  # (restored by deleting: the class had inherited it)


def _patch(owner: Any, name: str, value: Any) -> None:
    _saved.append((owner, name, owner.__dict__.get(name, _ABSENT)))
    setattr(owner, name, value)


def _patch_method(owner: type, name: str, replace: Callable[[Any], Any]) -> None:
    """Replaces the method `name` of `owner` with replace(the method it had); on an extension
    type, on each Python class below it, with replace(the method that class had)."""
    try:
        _patch(owner, name, replace(getattr(owner, name)))
    except TypeError:  # (an extension type: its methods cannot be set)
        _saved.pop()
        for below in owner.__subclasses__():
            _patch_method(below, name, replace)


def validity_without_elapsed() -> None:
    """The validity counted from the end of the winning round, not from before its first write."""

    def replace(took: Any) -> Any:
        def _took(self: Any, token: bytes, start: int, fence: Optional[int], *rest: Any) -> bool:
            return took(self, token, _clock.monotonic_ns(), fence, *rest)

        return _took

    _patch_method(lock_state.LockState, "_took", replace)


def drift_ignored() -> None:
    """No clock drift allowance (ttl * drift_factor + 2 ms) taken off the validity."""
    _patch(judgement, "drift_ms", lambda ttl_ms, drift_factor: 0.0)


def quorum_of_half() -> None:
    """A quorum of N // 2 masters instead of N // 2 + 1."""
    _patch(scripts, "quorum", lambda n: n // 2)


def no_unlock_after_failure() -> None:
    """A failed attempt does not unlock the masters it took (its unlock round does nothing);
    the clean-up after an interruption is each kind's own."""

    def replace(unlock: Any) -> Any:
        def _unlock_request(self: Any, token: bytes, kind: type, expiry: bool = False) -> Any:
            if kind is not RunScript:
                return unlock(self, token, kind, expiry)
            return script(scripts.PING, 1, ((self._key, b""),), self._timeout_ms, True, True)

        return _unlock_request

    for owner in (lock_state.LockState, FairBase):
        _patch_method(owner, "_unlock_request", replace)


_EXTEND_CREATING = scripts._script(
    "local holder = redis.call('get', KEYS[1]) "
    "if holder == ARGV[1] or not holder then "
    "redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2]) return 1 end return 0"
)


def extend_creates_key() -> None:
    """An extend that sets the key again where it is missing."""

    def _extend_request(self: Any, token: bytes, ttl_ms: int, timeout_ms: float) -> Any:
        argv = ((self._key, token, str(ttl_ms).encode()),)
        return script(_EXTEND_CREATING, 1, argv, timeout_ms, True)

    _patch_method(lock_state.LockState, "_extend_request", lambda _: _extend_request)


def renewal_ignores_release() -> None:
    """The renewal goes on extending the token it was started for after the lock was released."""
    tokens: dict[int, bytes] = {}

    def replace(renew: Any) -> Any:
        def _renew_steps(self: Any, acquisition: int) -> Generator[Any, Any, Any]:
            if self._token is not None:
                tokens[id(self)] = self._token
                return (yield from renew(self, acquisition))
            token = tokens.get(id(self))
            if token is None:
                return None
            yield self._extend_request(token, self._ttl_ms, self._timeout_ms)
            return _clock.monotonic_ns() + self._renew_interval_ns()

        return _renew_steps

    _patch_method(lock_steps.LockBase, "_renew_steps", replace)


def fair_queue_jump() -> None:
    """A fair lock's waiter takes a new place in the queue at every attempt: a later caller can
    pass it."""
    acquire = FairBase._acquire_request

    def _acquire_request(self: Any, token: bytes) -> Any:
        self._ticket = None
        return acquire(self, token)

    _patch(FairBase, "_acquire_request", _acquire_request)


VARIANTS: dict[str, Callable[[], None]] = {
    "validity-without-elapsed": validity_without_elapsed,
    "drift-ignored": drift_ignored,
    "quorum-of-half": quorum_of_half,
    "no-unlock-after-failure": no_unlock_after_failure,
    "extend-creates-key": extend_creates_key,
    "renewal-ignores-release": renewal_ignores_release,
    "fair-queue-jump": fair_queue_jump,
}


@contextmanager
def applied(name: Optional[str]) -> Iterator[None]:
    """The variant `name` (None: the library as it is) while the block runs."""
    if name is None:
        yield
        return
    VARIANTS[name]()
    try:
        yield
    finally:
        while _saved:
            owner, attr, value = _saved.pop()
            if value is _ABSENT:
                delattr(owner, attr)
            else:
                setattr(owner, attr, value)
