"""Read-write locks: many readers or one writer of a name, judged over a quorum as a lock is.

Each side is a lock kind (ReaderBase, WriterBase: the API classes add Lock's or AsyncLock's API)
whose rounds run the read-write scripts of _core/scripts.py on the name's keys (keys.py); the retry,
deadline, unlock, renewal and cancellation logic is LockBase's. A reader is an entry of its own
in the readers' set, with its own expiry; the writer is a key with its ttl, as a lock's.

Why it excludes: a writer and a reader each held by a quorum share a master, which saw both
attempts and refused the second (a writer is refused while a live reader is there, a reader
while a writer is). Writer preference: a writer that is refused marks itself waiting on the
masters (for the waiting window, renewed by each attempt), and new readers are refused while a
writer waits, so a stream of readers cannot starve it. Readers are not starved by writers: the
readers refused for a writer mark themselves waiting, and that writer's release gives them a pass
(for the waiting window, cut short once the first of them entered, and over when the last reader
leaves) during which readers may enter and the next writer may not. A failed attempt's unlock
is an undo (READ_UNDO, WRITE_UNDO): it takes back the attempt's own entry or key and marks the
waiter on every master, never opening or ending a pass.
"""

from __future__ import annotations

from typing import Any, Callable, Generic, Optional, TypeVar

from .._engines.contract import RoundResult
from . import judgement as _judgement
from . import scripts as _scripts
from .compat import Unpack
from .lock_steps import LockBase
from .options import LockOptions
from .requests import Request, RunScript, script
from .validation import Duration, lock_name

# The readers' pass after a writer's release lasts the window, or this long once the first reader
# went through it (the readers woken by the same release arrive within a round or two): two round
# timeouts and 10 ms. Until then no writer enters.
GRACE_ROUNDS = 2
GRACE_MIN_MS = 10


class _SideBase(LockBase):
    """What both sides share: the name's keys, the waiting window, the scripts' arguments."""

    __slots__ = ("_args", "_keys")
    _takes_turns = False  # (see LockBase)
    _acquire_script: _scripts.Script
    _release_script: _scripts.Script
    _undo_script: _scripts.Script
    _extend_script: _scripts.Script
    _key_index = 0  # which of the name's keys is this side's own (its `key`)

    def __init__(self, client: Any, name: str | bytes, ttl: Duration, **options: Any) -> None:
        super().__init__(client, name, ttl, **options)
        self._keys = self._layout.rw
        self._announce = self._layout.rw_channel
        window_ms = _judgement.waiting_window_ms(self._session.retry_delay, self._timeout_ms)
        grace_ms = int(GRACE_ROUNDS * self._timeout_ms + GRACE_MIN_MS)
        self._args = (
            str(self._ttl_ms).encode(),
            str(window_ms).encode(),
            str(grace_ms).encode(),
            self._announce,
        )
        self._key = self._keys[self._key_index]

    def _request(
        self, chosen: _scripts.Script, token: bytes, wait_all: bool, *extra: bytes, **how: Any
    ) -> Request:
        argv = (*self._keys, token, *self._args, *extra)
        return script(chosen, 5, (argv,), self._timeout_ms, wait_all, **how)

    def _acquire_request(self, token: bytes) -> Request:
        return self._request(self._acquire_script, token, False, honour_backoff=True)

    def _release_request(self, token: bytes) -> Request:
        return self._request(self._release_script, token, True)

    def _unlock_request(self, token: bytes, kind: type, expiry: bool = False) -> Request:
        # (kind RunScript: after a failed attempt, which tries again if it may; Cleanup: abandoned)
        retries = kind is RunScript
        marks_waiting = b"1" if retries else b"0"
        return self._request(
            self._undo_script, token, True, marks_waiting, honour_backoff=retries, kind=kind
        )

    def _free_in(self, unlocked: RoundResult) -> Optional[float]:
        return None  # (no expiry hint: a reader or writer waits for a notice or its timer)

    def _extend_request(self, token: bytes, ttl_ms: int, timeout_ms: float) -> Request:
        argv = (*self._keys, token, str(ttl_ms).encode(), *self._args[1:])
        return script(self._extend_script, 5, (argv,), timeout_ms, True)

    def _wake_channel(self) -> bytes:
        return self._announce


class ReaderBase(_SideBase):
    """A read lock: one reader of the name (its key is the readers' set)."""

    __slots__ = ()
    _kind = "ReadLock"
    _event_kind = "ReadLock"
    _key_index = 1
    _acquire_script = _scripts.READ_ACQUIRE
    _release_script = _scripts.READ_RELEASE
    _undo_script = _scripts.READ_UNDO
    _extend_script = _scripts.READ_EXTEND

    def _check_request(self, token: bytes) -> Request:
        argvs = ((self._key, token),)
        return script(_scripts.READ_CHECK, 1, argvs, self._timeout_ms, True, want_values=True)


class WriterBase(_SideBase):
    """A write lock: the one writer of the name (its key is the writer's)."""

    __slots__ = ()
    _kind = "WriteLock"
    _event_kind = "WriteLock"
    _acquire_script = _scripts.WRITE_ACQUIRE
    _release_script = _scripts.WRITE_RELEASE
    _undo_script = _scripts.WRITE_UNDO
    _extend_script = _scripts.EXTEND


_R = TypeVar("_R", bound=LockBase)
_W = TypeVar("_W", bound=LockBase)


class RWLockBase(Generic[_R, _W]):
    """A read-write lock's name and options; read() and write() make its lock objects (one per
    holder, as lock() does). Made by a client's rwlock(); no I/O happens here."""

    # the API's lock classes of each side (ReadLock and WriteLock, or their asyncio twins)
    _read_class: Callable[..., _R]
    _write_class: Callable[..., _W]

    def __init__(
        self, client: Any, name: str | bytes, ttl: Duration, **options: Unpack[LockOptions[Any]]
    ) -> None:
        lock_name(name)
        if options.get("fencing", False) is not False:
            raise ValueError("fencing is not supported for read-write locks")
        self._name = name
        self._make_read: Callable[[], _R] = lambda: self._read_class(client, name, ttl, **options)
        self._make_write: Callable[[], _W] = lambda: self._write_class(client, name, ttl, **options)
        self._make_read()  # the options are checked now, before any I/O

    @property
    def name(self) -> str | bytes:
        return self._name

    def __repr__(self) -> str:
        return f"<hiredlock.{type(self).__name__} {self._name!r}>"
