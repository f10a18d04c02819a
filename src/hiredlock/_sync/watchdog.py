"""The watchdog: one thread per Redlock that extends its auto-renewed locks at about ttl/3, and
another that runs the on_lost callbacks of the locks its renewals found lost (so that a slow
callback never delays a renewal)."""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
import weakref
from collections import deque
from typing import Callable, Optional

from .._core.fork import generation as _fork_generation
from .._core.session import Session

Renewal = Callable[[int], Optional[int]]  # a lock's renewal: acquisition -> when next, or None

_log = logging.getLogger("hiredlock.renewal")


class Watchdog:
    """Renews locks until they are released, lost, past max_hold, or their owner thread ended.

    Entries hold the lock's renewal (a bound method) weakly: a Lock object nobody references any
    more is not kept alive
    (nor renewed) by the watchdog. The thread starts with the first watched lock and ends in
    close(), which waits for it. A forked child never uses its parent's watchdog (its thread
    does not exist there): the Redlock makes the child a new one.

    call_soon() runs a callback on the callbacks' thread (see Callbacks): renewals never wait
    for it.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._callbacks = Callbacks(name)
        self._wakeup = threading.Condition(threading.Lock())
        # (when ns, seq, the lock's renewal, acquisition)
        self._due: list[tuple[int, int, weakref.WeakMethod[Renewal], int]] = []
        self._seq = itertools.count()
        self._thread: Optional[threading.Thread] = None
        # Its own flag, not the session's closed: it is read with the heap under _wakeup by the
        # renewal thread, and stop() comes after the session is closed (a renewal in flight may
        # still reschedule until then); a forked child's watchdog is a new one.
        self._closed = False

    def watch(self, renewal: Renewal, acquisition: int, due_ns: int) -> bool:
        """Schedules a renewal; False when none can run (closed, or no thread could start)."""
        with self._wakeup:
            if self._closed:
                return False
            entry = (due_ns, next(self._seq), weakref.WeakMethod(renewal), acquisition)
            heapq.heappush(self._due, entry)
            if self._thread is None:
                thread = threading.Thread(
                    target=self._run, name=f"hiredlock-watchdog-{self._name}", daemon=True
                )
                try:
                    thread.start()
                except RuntimeError:  # "can't start new thread": out of threads or shutting down
                    self._due.clear()
                    return False
                self._thread = thread
            self._wakeup.notify()
            return True

    def call_soon(self, callback: Callable[[], None]) -> None:
        """Runs `callback` (which handles its own exceptions) on the callbacks' thread."""
        self._callbacks.call_soon(callback)

    def close(self) -> None:
        """Stops renewing and waits for the thread (a renewal in flight finishes first), then
        for the callbacks still queued or running."""
        with self._wakeup:
            self._closed = True
            self._due.clear()
            thread = self._thread
            self._wakeup.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        self._callbacks.close()

    def _run(self) -> None:
        while True:
            with self._wakeup:
                while not self._closed:
                    now = time.monotonic_ns()
                    if self._due and self._due[0][0] <= now:
                        break
                    wait_ns = self._due[0][0] - now if self._due else None
                    self._wakeup.wait(None if wait_ns is None else wait_ns / 1e9)
                if self._closed:
                    return
                _when, _seq, renewal_ref, acquisition = heapq.heappop(self._due)
            renewal = renewal_ref()
            if renewal is None:
                continue
            try:
                next_due = renewal(acquisition)
            except Exception:  # never let one lock's surprise stop the renewal of the others
                # (renewal.__self__: the lock; a renewal is its bound method, as WeakMethod needs)
                _log.exception("hiredlock watchdog: renewing %r failed", renewal.__self__)  # type: ignore[attr-defined]
                next_due = None
            if next_due is not None:
                self.watch(renewal, acquisition, next_due)
            del renewal  # hold no reference while waiting: a dropped lock must be collectable


class Callbacks:
    """Runs callbacks one after another on a thread of their own: started by the first callback,
    ended as soon as none is left (the next one starts another). A slow callback delays only the
    callbacks after it.

    close() waits until the callbacks already queued have run and the thread has ended; after
    it, a callback runs at once in the caller's thread, as it does when no thread can start.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._mutex = threading.Lock()
        self._queue: deque[Callable[[], None]] = deque()
        self._thread: Optional[threading.Thread] = None  # the last one started
        self._running = False  # whether it still takes callbacks from the queue
        # Its own flag, not the session's closed: it says that the thread was joined (callbacks
        # run inline from then on), which comes after the client is closed.
        self._closed = False

    def call_soon(self, callback: Callable[[], None]) -> None:
        with self._mutex:
            if not self._closed:
                self._queue.append(callback)
                if self._running:
                    return
                thread = threading.Thread(
                    target=self._run,
                    args=(self._thread,),
                    name=f"hiredlock-on-lost-{self._name}",
                    daemon=True,
                )
                try:
                    thread.start()
                except RuntimeError:  # "can't start new thread": out of threads or shutting down
                    self._queue.pop()
                else:
                    self._thread = thread
                    self._running = True
                    return
        callback()

    def close(self) -> None:
        with self._mutex:
            self._closed = True
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self, previous: Optional[threading.Thread]) -> None:
        if previous is not None:
            previous.join()  # (it was ending: joining this thread joins every one before it)
        while True:
            with self._mutex:
                if not self._queue:
                    self._running = False
                    return
                callback = self._queue.popleft()
            try:
                callback()
            except Exception:  # (the callbacks log their own: this is a last resort)
                _log.exception("hiredlock: a callback raised")
            del callback


class Renewals:
    """The watchdog of one blocking client, made on first use and never shared with a forked
    child (the parent's thread does not exist there: the child gets a watchdog of its own)."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._watchdog: Optional[Watchdog] = None
        self._generation = _fork_generation[0]

    def watchdog(self) -> Watchdog:
        """The client's watchdog; a closed one once the client is closed (watch() on it does
        nothing: locks taken after close() are not renewed)."""
        session = self._session
        session.this_process()
        with session.mutex:
            if self._generation != _fork_generation[0]:
                self._watchdog, self._generation = None, _fork_generation[0]
            if self._watchdog is None and not session.closed:
                self._watchdog = Watchdog(session.label)
            return self._watchdog or _CLOSED_WATCHDOG

    def stop(self) -> None:
        """Stops renewing; the thread has ended when this returns."""
        with self._session.mutex:
            watchdog, self._watchdog = self._watchdog, None
        if watchdog is not None:
            watchdog.close()


_CLOSED_WATCHDOG = Watchdog("closed")
_CLOSED_WATCHDOG.close()
