"""Fair locks: waiters get the lock in the order they asked for it.

A fair lock is a lock on the name's key (as a Lock is) with a queue in front of it on each
master (NameKeys.fair): an attempt queues its acquire() call's ticket under the call's
order, the time it was made (this client's clock, in microseconds; the ticket breaks ties), and
takes the lock only where that ticket is first in the queue and the lock is free (FAIR_ACQUIRE).
The order being the same number on every master, every master's queue has the same order, so
no two waiters can each be first on a part of the masters and block each other.

A waiter's place lasts the waiting window (_judgement.waiting_window_ms) past its last attempt:
a waiter that died leaves the queue within it. A call that gives up (deadline, blocking=False,
an exception) leaves the queue at once; a release leaves it and wakes the next (FAIR_RELEASE).
Where an attempt takes the lock, its place lasts only as long as the key it took there (a window
at most): a holder that never releases holds the next waiter back until its key expires, not a
window past its attempt. An attempt that failed gives its place the whole window back where it
had taken the lock (FAIR_UNDO, its unlock): a waiter keeps its place on every master.
The retry, deadline, unlock, renewal and cancellation logic is LockBase's.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from .._engines.contract import RoundResult
from . import clock as _clock
from . import judgement as _judgement
from . import scripts as _scripts
from .lock_steps import LockBase
from .requests import Cleanup, Request, RunScript, Steps, script
from .tokens import new_token
from .validation import Duration

_log = logging.getLogger("hiredlock.lock")


class FairBase(LockBase):
    """A fair lock's queue and rounds (FairLock and hiredlock.aio.AsyncFairLock add the API)."""

    __slots__ = ("_held_ticket", "_order", "_queue", "_ticket", "_window")
    _takes_turns = False  # (see LockBase)
    _kind = "FairLock"
    _event_kind = "FairLock"

    def __init__(self, client: Any, name: str | bytes, ttl: Duration, **options: Any) -> None:
        if options.get("fencing", False) is not False:
            # (a fenced attempt is its own round, which would not queue)
            raise ValueError("fencing is not supported for fair locks")
        super().__init__(client, name, ttl, **options)
        self._queue = self._layout.fair
        window = _judgement.waiting_window_ms(self._session.retry_delay, self._timeout_ms)
        self._window = str(window).encode()
        self._ticket: Optional[bytes] = None  # the acquire() call's place in the queues
        self._order = b""
        self._held_ticket = b""  # the holder's ticket, for its release

    def _attempts(
        self, blocking: Any, deadline_ns: Optional[int], turn: Any = None, counted: bool = False
    ) -> Steps:
        """LockBase's attempts and the queue's steps after them, counted together as under way
        for the client's close() (the queue's are clean-ups that must still go out)."""
        queued = self._queued_attempts(blocking, deadline_ns, turn)
        return queued if counted else self._session.counted_acquire(queued)

    def _queued_attempts(self, blocking: Any, deadline_ns: Optional[int], turn: Any) -> Steps:
        """LockBase's attempts, in a place of the queue taken by the first one and left when
        the call ends without the lock (a fair lock takes no turns: `turn` is None)."""
        try:
            acquired = yield from LockBase._attempts(self, blocking, deadline_ns, turn, True)
        except BaseException:
            yield from self._leave_steps()
            raise
        if acquired:
            self._held_ticket = self._ticket or b""
            self._ticket = None
        else:
            yield from self._leave_steps()
        return acquired

    def _acquire_request(self, token: bytes) -> Request:
        if self._ticket is None:  # (the call's first attempt)
            self._ticket = new_token()
            self._order = b"%d" % (_clock.time_ns() // 1000)
        return script(
            _scripts.FAIR_ACQUIRE,
            3,
            (self._attempt_argv(token),),
            self._timeout_ms,
            False,
            honour_backoff=True,
        )

    def _attempt_argv(self, token: bytes) -> tuple[bytes, ...]:
        """FAIR_ACQUIRE's (and FAIR_UNDO's) keys and arguments for this call's attempt."""
        ticket = self._ticket or b""
        ttl = b"%d" % self._ttl_ms
        return (
            self._key,
            *self._queue,
            token,
            ttl,
            ticket,
            self._order,
            self._window,
            self._announce,
        )

    def _unlock_request(self, token: bytes, kind: type, expiry: bool = False) -> Request:
        """After a failed attempt (kind RunScript), the ticket gets back its place for the window
        where the attempt took the lock (FAIR_UNDO). After an interrupted one (Cleanup), a
        lock's unlock: the call leaves the queue next (_acquire_steps). After an interrupted
        release (Cleanup, no call's ticket: the holder's), the release itself: the holder's
        ticket leaves the queue with the key, else it would hold the next waiter back."""
        if kind is Cleanup and self._ticket is None and self._held_ticket:
            return self._release_request(token, Cleanup)
        if kind is not RunScript or self._ticket is None:
            return LockBase._unlock_request(self, token, kind, expiry)
        return script(
            _scripts.FAIR_UNDO,
            3,
            (self._attempt_argv(token),),
            self._timeout_ms,
            True,
            want_values=expiry,
            honour_backoff=True,
        )

    def _free_in(self, unlocked: RoundResult) -> Optional[float]:
        """The holder's expiry, when the lock is held: a waiter refused while it was free was
        not first in the queue, and waits for a notice (the queue moving) or its timer. (Where
        the key went after the attempt and this waiter is first, FAIR_UNDO says it expires now.)"""
        free_in = LockBase._free_in(self, unlocked)
        return free_in if free_in else None

    def _release_request(
        self, token: bytes, kind: type[RunScript | Cleanup] = RunScript
    ) -> Request:
        argv = (self._key, *self._queue, token, self._held_ticket, self._announce)
        return script(_scripts.FAIR_RELEASE, 3, (argv,), self._timeout_ms, True, kind=kind)

    def _leave_steps(self) -> Steps:
        """Takes this call's ticket out of every master's queue (best effort, as an unlock)."""
        ticket, self._ticket = self._ticket, None
        if ticket is None or self._session.rounds_closed:
            return
        argv = (self._key, *self._queue, b"", ticket, self._announce)
        try:
            yield script(_scripts.FAIR_RELEASE, 3, (argv,), self._timeout_ms, True, kind=Cleanup)
        except Exception as exc:
            _log.warning("hiredlock: leaving the queue of %r failed: %s", self._name, exc)
