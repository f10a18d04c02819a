"""What every lock of one client shares: the masters, the options, the rounds, the locks held.

A Redlock and an AsyncRedlock each own one Session; their locks hold it too. It does no I/O of its
own: `rounds` runs the rounds (blocking for a Redlock, on the event loop for an AsyncRedlock).
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Callable, Optional

from .._engines.contract import RoundResult
from . import judgement as _judgement
from . import masters as _masters
from . import observe as _observe
from . import scripts as _scripts
from . import validation as _validation
from .errors import HiredlockError, Vote
from .events import Observer, Teller
from .fork import generation as _fork_generation
from .keys import NameKeys
from .masters import MasterLike, MasterSpec
from .scripts import Outcome
from .state_mutex import StateMutex
from .turns import Turns
from .validation import Duration

try:
    import cython  # type: ignore[import-untyped]
except ImportError:  # uncompiled, without Cython installed: only `compiled` is read
    from types import SimpleNamespace

    cython = SimpleNamespace(compiled=False)

if TYPE_CHECKING:
    from .requests import Steps

# The most lock names whose keys a client keeps made (see name_keys)
NAME_KEYS_CACHED = 256

# The size of the registry of held locks past which a lock entering it first takes out the dead
# references (see Session.held_locks)
HELD_PRUNED_PAST = 64

Timing = tuple[int, float, float]  # ttl in ms, per-master timeout in ms, drift in ms


class Session:
    """The masters and options of one client, and the registry of the locks it holds.

    The registry is a set of weak references, one per lock (each lock makes its own once, see
    registry_entry(); lock objects compare by identity, and so do their live references), so
    that a held lock its caller dropped is neither kept alive nor renewed (its keys expire with
    their ttl). close() releases the others; inspect() recognises their tokens. Single set
    operations are atomic; a lock enters it under the state mutex (see LockState._took).

    The references have no callback (a callback would run at the death of every lock object,
    held or not): a lock dropped while held leaves a dead reference, which goes when the
    registry is read (held_locks), which a lock entering it does past `held_bound`.
    """

    __slots__ = (
        "__weakref__",
        "_name_keys",
        "_on_settled",
        "_settled",
        "_timings",
        "backend",
        "closed",
        "closing",
        "drift_factor",
        "engine_class",
        "engine_stale",
        "fixed_timeout_ms",
        "generation",
        "heard",
        "held",
        "held_bound",
        "label",
        "master_names",
        "masters",
        "mutex",
        "namespace",
        "notices",
        "quiet_acquire",
        "quiet_oks",
        "quiet_wait_all",
        "quorum",
        "renewals",
        "retry_count",
        "retry_delay",
        "rounds",
        "rounds_closed",
        "state_mutex",
        "tell",
        "turns",
        "under_way",
        "wake",
    )

    def __init__(
        self,
        masters: Iterable[MasterLike],
        *,
        retry_count: int,
        retry_delay: Duration,
        drift_factor: float,
        master_timeout: Optional[Duration],
        engine_class: Any,
        observers: tuple[Observer, ...] = (),
        namespace: Any = None,
    ) -> None:
        # the prefix of every key and channel (see _core/keys.py)
        self.namespace: bytes = _validation.namespace(namespace)
        self.engine_class: Any = engine_class  # the owner's choice (hiredlock._engines.selection)
        self.backend: str = self.engine_class.name
        # Whether an engine is out of date and must be replaced (a cluster's, whose links
        # changed), or None when engines never are
        self.engine_stale: Optional[Callable[[Any], bool]] = getattr(
            engine_class, "engine_stale", None
        )
        self.masters: tuple[MasterSpec, ...] = _masters.parse_masters(masters)
        self.master_names = tuple(str(spec) for spec in self.masters)
        self.quorum = _scripts.quorum(len(self.masters))
        self.retry_count = _validation.non_negative_int(retry_count, "retry_count")
        if self.retry_count < 1:
            raise ValueError("retry_count must be at least 1 (it counts attempts), got 0")
        self.retry_delay = _validation.non_negative_seconds(retry_delay, "retry_delay")
        self.drift_factor = _validation.drift_factor(drift_factor)
        self.fixed_timeout_ms = (
            None
            if master_timeout is None
            else _validation.positive_duration_ms(master_timeout, "master_timeout")
        )
        # (a cluster's first slot map: waited for no longer than a round waits on a master)
        limit_first_map_wait = getattr(engine_class, "limit_first_map_wait", None)
        if limit_first_map_wait is not None:
            longest_ms = self.fixed_timeout_ms or _scripts.MASTER_TIMEOUT_MAX_MS
            limit_first_map_wait(longest_ms / 1000.0)
        # What tells the client's observers (see _core/events.py); None when nobody listens, so
        # that the steps build no Event then.
        self.tell: Optional[Teller] = Teller(observers) if observers else None
        # What a round that counted must show besides these votes for its lock to say more
        # (judgement.says_more(codes, quiet_...): a short loop in C on the hot path): a vote
        # of a degraded round (see _core/observe.py) when nobody listens, anything when someone
        # does.
        self.quiet_acquire = b"" if observers else _observe.HEALTHY_ACQUIRE
        self.quiet_wait_all = b"" if observers else _observe.HEALTHY_WAIT_ALL
        # (a release's: the OK votes of a round with nothing more to say; never, when observed)
        self.quiet_oks = -1 if observers else len(self.masters)
        self.label = hex(id(self))  # names the watchdog thread; the owner may set its own
        # Made by the client's flavour (see _core/flavour.py): what runs the rounds (run(steps,
        # pin=None)), what wakes waiters on a release (see _engines/notices.py), what renews the
        # locks (a blocking client's watchdog; None for asyncio).
        self.rounds: Any = None
        self.notices: Any = None
        self.renewals: Any = None
        # the notices' counts by channel (their `heard`), read by every attempt of a lock that
        # notices wake (see requests.heard_on): a field of this class, read in C once compiled
        self.heard: dict[bytes, int] = {}
        self.wake = True
        self.held: set[weakref.ref[Any]] = set()
        self.held_bound = HELD_PRUNED_PAST  # (see held_locks)
        self.turns = Turns()  # the blocking acquires' turns at the masters, by name
        # The one record of the client's closing, which the rounds, the engine pool and the
        # notices read (they keep no flag of their own):
        self.closed = False  # set first by close(): no acquire may win from then on
        self.rounds_closed = False  # set last (close_rounds()): no round can go out any more
        self.closing = threading.Event()  # set with `closed`: ends the waits between attempts
        # Orders `closed` with the count of acquires under way (see begin_acquire) and with the
        # locks entering `held` (see LockState._took): a lock that wins after close() has set
        # `closed` is never registered, so close() finds every lock it must release. Only fields
        # are read and written under it (see state_mutex.py).
        self.state_mutex = StateMutex()
        self.mutex = threading.Lock()  # the rest: the settling of the acquires, the watchdog
        # acquires under way (see begin_acquire), and locks let go whose release or unlock round
        # has not ended (LockState._let_go counts them: close() no longer releases those itself)
        self.under_way = 0
        self._settled = threading.Condition(self.mutex)
        self._on_settled: list[Callable[[], None]] = []
        self.generation = _fork_generation[0]  # the process (see _fork) the state above is of
        self._timings: dict[Any, Timing] = {}
        self._name_keys: dict[str | bytes, NameKeys] = {}

    def new_engine(self) -> Any:
        return self.engine_class(self.masters, self.quorum)

    # -- options -------------------------------------------------------------------------------

    def master_timeout_ms(self, ttl_ms: float) -> float:
        """The per-master wait of one round for a lock of this ttl."""
        if self.fixed_timeout_ms is not None:
            return self.fixed_timeout_ms
        return _judgement.default_master_timeout_ms(ttl_ms)

    def timing(self, ttl: Any) -> Timing:
        """ttl in ms, per-master timeout and drift; refuses a ttl that could never be valid.

        Cached, as lock loops reuse a few ttls: an int or a float by its value (1 and 1.0 give
        one timing), any other kind with its type (True is not 1 here, and is refused).
        """
        kind = type(ttl)
        cache_key = ttl if kind is int or kind is float else (kind, ttl)
        try:
            timing: Optional[Timing] = self._timings.get(cache_key)
        except TypeError:  # not hashable: validated below
            timing = None
        if timing is not None:
            return timing
        ttl_ms = _validation.ttl_ms(ttl, "ttl")
        timeout_ms = self.master_timeout_ms(ttl_ms)
        drift = _judgement.drift_ms(ttl_ms, self.drift_factor)
        if _judgement.validity_ms(ttl_ms, timeout_ms, self.drift_factor) <= 0:
            raise ValueError(
                f"ttl of {ttl_ms} ms is too short: the per-master timeout ({timeout_ms:g} ms) "
                f"and the clock drift allowance ({drift:g} ms) would leave no validity"
            )
        if len(self._timings) >= 64:
            self._timings.clear()
        self._timings[cache_key] = timing = (ttl_ms, timeout_ms, drift)
        return timing

    def name_keys(self, name: Any) -> NameKeys:
        """The keys of the lock name `name` under this client's namespace (the name checked: see
        validation.lock_name). Cached for a str or a bytes name (a str never equals a bytes), as
        timing() is: code that makes a lock object per use (`with redlock.lock(name, ttl):`)
        checks each of its names once."""
        kind = type(name)
        if kind is not str and kind is not bytes:  # (refused below, or a subclass: not kept)
            return NameKeys(self.namespace, _validation.lock_name(name))
        layout: Optional[NameKeys] = self._name_keys.get(name)
        if layout is not None:
            return layout
        layout = NameKeys(self.namespace, _validation.lock_name(name))
        if len(self._name_keys) >= NAME_KEYS_CACHED:
            self._name_keys.clear()
        self._name_keys[name] = layout
        return layout

    def votes(self, result: RoundResult) -> tuple[Vote, ...]:
        codes, details = result[0], result[2] or {}
        return tuple(
            Vote(name, Outcome(code), details.get(index))
            for index, (name, code) in enumerate(zip(self.master_names, codes))
        )

    def check_open(self) -> None:
        if self.closed:
            raise closed_error()

    # -- closing with acquires in flight ---------------------------------------------------------

    def begin_acquire(self) -> None:
        """An acquire's steps begin (HiredlockError when closed): close() waits until every
        acquire begun has ended, having won nothing (it unlocks what its rounds took once it sees
        the client closed) or having its lock registered in `held`, which close() releases.

        Counted under the state mutex, with its look at `closed` (close() sets it under the same
        mutex): either close() waits for this acquire, or this acquire sees the client closed."""
        if self.generation != _fork_generation[0]:
            self.this_process()
        with self.state_mutex.lock:
            closed = self.closed
            if not closed:
                self.under_way += 1
        if closed:
            raise closed_error()

    def counted_acquire(self, attempts: Steps) -> Steps:
        """An acquire's attempts, counted as under way for close() (begin_acquire: refused once
        closed). A method, so that its calls of begin_acquire and end_acquire are C calls once
        compiled (session.pxd)."""
        self.begin_acquire()
        try:
            return (yield from attempts)
        finally:
            self.end_acquire()

    def end_acquire(self, count: int = 1) -> None:
        """An acquire has ended, or the rounds of `count` locks let go (see under_way)."""
        with self.state_mutex.lock:
            if self.under_way > 0:  # (begun before a fork: this process's count began after it)
                self.under_way = max(0, self.under_way - count)
            settled = self.under_way == 0 and self.closed
        if not settled:
            return
        with self.mutex:  # (the last acquire of a closed client: the waits for it end)
            self._settled.notify_all()
            callbacks, self._on_settled = self._on_settled, []
        for callback in callbacks:
            callback()

    def close(self) -> bool:
        """Marks the client closed (False when it was already) and ends the waits between
        attempts; the acquires in flight then end within a round or two."""
        self.this_process()
        with self.state_mutex.lock:
            if self.closed:
                return False
            self.closed = True
        self.closing.set()
        self.notices.close()  # (its waiters are woken)
        return True

    def close_rounds(self) -> None:
        """The last step of closing (once the acquires under way have ended): no round goes out
        from here on, and the connections close."""
        self.rounds_closed = True
        self.rounds.close()

    def wait_settled(self, timeout: float) -> bool:
        """Blocks until no acquire is under way (or the timeout: False)."""
        with self.mutex:
            return self._settled.wait_for(lambda: not self.under_way, timeout)

    def when_settled(self, callback: Callable[[], None]) -> None:
        """Calls `callback` once no acquire is under way (now, if none is)."""
        with self.mutex:
            if self.under_way:
                self._on_settled.append(callback)
                return
        callback()

    # -- the locks held ------------------------------------------------------------------------

    def registry_entry(self, lock: Any) -> weakref.ref[Any]:
        """The weak reference that stands for `lock` in `held` (each lock makes one, once)."""
        if cython.compiled:  # (session.pxd's cimport: the C call weakref.ref makes)
            ref: weakref.ref[Any] = PyWeakref_NewRef(lock, None)  # type: ignore[name-defined]  # noqa: F821
        else:
            ref = weakref.ref(lock)
        # (computed while the lock lives: once dead, the reference keeps this hash, is equal to
        # itself only, and is still found and discarded by it)
        hash(ref)
        return ref

    def held_locks(self) -> list[Any]:
        """The live locks of `held`. The walk also takes the dead references (locks dropped while
        held) out of it, and sets the size past which the next lock entering it walks it again
        (LockState._took): twice what is left, so that the walks cost a constant share of the
        entries."""
        held = self.held
        live = []
        for ref in list(held):
            lock = ref()
            if lock is None:
                held.discard(ref)  # (one at a time: a concurrent discard is never undone)
            else:
                live.append(lock)
        self.held_bound = max(HELD_PRUNED_PAST, 2 * len(held))
        return live

    def token_held_for(self, key: bytes) -> bytes:
        for lock in self.held_locks():
            token: Optional[str] = lock.token
            if lock.key == key and token is not None:
                stored: bytes = lock._token  # (with its owner label, as the masters hold it)
                return stored
        return b""

    def this_process(self) -> bool:
        """In a forked child (True): the parent's held locks are not ours to release or renew,
        and the parent's mutexes (which one of its threads may have held) are replaced."""
        if self.generation == _fork_generation[0]:
            return False
        self.state_mutex = StateMutex()
        self.mutex = threading.Lock()
        self._settled = threading.Condition(self.mutex)
        self._on_settled = []
        closing = threading.Event()  # (the parent's may be in use by one of its threads)
        if self.closed:
            closing.set()
        self.closing = closing
        self.under_way = 0  # (the parent's threads that were acquiring do not exist here)
        self.held = set()
        self.turns = Turns()  # (the parent's waiters do not exist here)
        self.generation = _fork_generation[0]
        return True


def closed_error() -> HiredlockError:
    """What a closed client raises for an acquire, or for any round once its connections closed."""
    return HiredlockError("this Redlock is closed")
