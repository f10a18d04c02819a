"""A multilock: one lock over several names, taken only if all of them are, written once for
MultiLock (blocking) and AsyncMultiLock (asyncio) on LockBase's steps (_core/lock_steps.py).

It is a lock whose requests cover several keys: each round runs one script per master over all
of its names (_scripts.MULTI_ACQUIRE, MULTI_RELEASE, MULTI_EXTEND), which takes, releases or
extends all of them on that master or none. A master's vote is thus the whole lock's, and the
judgement is a lock's: held when a quorum of masters took every name, in time (the validity
counted once, from the attempt's start). An attempt that failed unlocks every name on every
master, as a lock's does, and waiters are woken by a release of any of the names.

No deadlock between multilocks that share names, whatever order each lists them in: a master
never holds part of one (it runs each script alone), and no attempt keeps anything it took
when it failed; two of them contending are two locks contending (the random retry delay splits
them).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from . import scripts as _scripts
from . import validation as _validation
from .compat import Unpack
from .keys import NameKeys
from .lock_steps import LockBase
from .options import LockOptions
from .requests import Request, RunScript, script
from .slots import key_slot
from .validation import Duration

if TYPE_CHECKING:
    from .client import ClientBase

_ACQUIRE = _scripts.MULTI_ACQUIRE
_RELEASE = _scripts.MULTI_RELEASE
_EXTEND = _scripts.MULTI_EXTEND

# The most names one multilock may have (each round's script touches every one on every master).
MAX_NAMES = 1000


def multilock_keys(names: Any) -> tuple[tuple[Any, ...], tuple[bytes, ...]]:
    """(the names, their keys), checked before any I/O: an iterable (not one name) of 1 to
    MAX_NAMES valid names, none twice."""
    if isinstance(names, (str, bytes, bytearray, memoryview)):
        raise TypeError(f"names must be an iterable of names, not a single {type(names).__name__}")
    if not isinstance(names, Iterable):
        raise TypeError(f"names must be an iterable of names, not {type(names).__name__}")
    names = tuple(names)
    if not names:
        raise ValueError("names must not be empty: a multilock needs one name at least")
    if len(names) > MAX_NAMES:
        raise ValueError(f"a multilock has at most {MAX_NAMES} names, got {len(names)}")
    keys = tuple(_validation.lock_name(name) for name in names)
    seen: set[bytes] = set()
    for name, key in zip(names, keys):
        if key in seen:
            raise ValueError(f"names must not repeat: {name!r} is given twice")
        seen.add(key)
    return names, keys


class MultiLockBase(LockBase):
    """One lock over several names (MultiLock and hiredlock.aio.AsyncMultiLock add the API):
    held when a quorum of masters holds every name with its token. Its `name` is the tuple of
    names, `key` the first name's key, `keys` all of them. Made by a client's multilock(); no
    I/O happens here."""

    __slots__ = ("_channels", "_keys", "_names")
    _takes_turns = False  # (see LockBase)

    _kind = "MultiLock"
    _event_kind = "MultiLock"

    def __init__(
        self,
        client: ClientBase,
        names: Iterable[str | bytes],
        ttl: Duration,
        **options: Unpack[LockOptions[Any]],
    ) -> None:
        checked, keys = multilock_keys(names)
        if options.get("fencing", False) is not False:
            # A fence orders the holders of one name; a multilock has several (each name's
            # holders would need their own counter, and no one fence orders them all).
            raise ValueError("fencing is not supported for a multilock")
        super().__init__(client, checked[0], ttl, **options)
        self._name = checked  # type: ignore[assignment]
        self._names = checked
        namespace = self._session.namespace
        layouts = [NameKeys(namespace, key) for key in keys]
        self._keys = tuple(layout.key for layout in layouts)
        self._channels = tuple(layout.channel for layout in layouts)
        if any(spec.cluster is not None for spec in self._session.masters):
            # One script takes every name on a master: on a Redis Cluster, that is one node,
            # so the names' keys must share its slot.
            slots = {key_slot(key) for key in self._keys}
            if len(slots) > 1:
                raise ValueError(
                    "on a Redis Cluster, a multilock's names must share one hash tag, so that "
                    "their keys are in one slot (e.g. '{order:42}:stock', '{order:42}:invoice'): "
                    f"{len(slots)} slots for names {self._names!r}"
                )

    @property
    def name(self) -> tuple[str | bytes, ...]:  # type: ignore[override]
        """The names, in the order given (as `names`)."""
        return self._names

    @property
    def names(self) -> tuple[str | bytes, ...]:
        """The names, in the order given."""
        return self._names

    @property
    def keys(self) -> tuple[bytes, ...]:
        """The names' keys, in the order given."""
        return self._keys

    # -- the rounds of a multilock: one script per master over every key --------------------------

    def _acquire_request(self, token: bytes) -> Request:
        argv = (*self._keys, token, str(self._ttl_ms).encode())
        return script(
            _ACQUIRE,
            len(self._keys),
            (argv,),
            self._timeout_ms,
            wait_all=False,
            honour_backoff=True,
        )

    def _release_argv(self, token: bytes) -> tuple[bytes, ...]:
        """MULTI_RELEASE's: the keys, the token, and each key's channel."""
        return (*self._keys, token, *self._wake_channel())

    def _release_request(self, token: bytes) -> Request:
        argvs = (self._release_argv(token),)
        return script(_RELEASE, len(self._keys), argvs, self._timeout_ms, True)

    def _unlock_request(self, token: bytes, kind: type, expiry: bool = False) -> Request:
        # (no expiry hint: the names may free themselves at different times; the waiter is woken
        # by a release of any of them, or by its timer)
        return script(
            _RELEASE,
            len(self._keys),
            (self._release_argv(token),),
            self._timeout_ms,
            True,
            honour_backoff=kind is RunScript,
            kind=kind,
        )

    def _extend_request(self, token: bytes, ttl_ms: int, timeout_ms: float) -> Request:
        argv = (*self._keys, token, str(ttl_ms).encode())
        return script(_EXTEND, len(self._keys), (argv,), timeout_ms, True)

    def _check_request(self, token: bytes) -> Request:
        # (every name must be ours on a master for its vote to count: the shortest life of them)
        argvs = ((*self._keys, token),)
        return script(
            _scripts.MULTI_CHECK, len(self._keys), argvs, self._timeout_ms, True, want_values=True
        )

    def _wake_channel(self) -> tuple[bytes, ...]:  # type: ignore[override]
        """A release of any of the names wakes a waiter (see _engines/notices.py)."""
        return self._channels

    def __repr__(self) -> str:
        state = "held" if self.held else ("lost" if self._lost else "unlocked")
        return f"<hiredlock.{self._kind} {list(self._names)!r} ttl={self.ttl:g}s {state}>"
