"""Masters in memory, and the faults a test makes on them (see hiredlock.testing).

A MemoryMasters is a group of N MemoryStores (one per master) on one clock: the masters' time is
the group's clock (default time.monotonic_ns) plus whatever advance() added, counted from the
wall clock at the group's creation (so that TIME looks like a server's). Every command runs under
the group's lock, so the masters are shared safely by threads, event loops and clients.

What a round's commands meet on master i (the memory engine, _engine.py, sends them here):
    running   they run at once; their replies reach the round at once, or `delay(i, s)` later
    stopped   they wait in the master's backlog (as a SIGSTOPped server's socket buffers them),
              and run in order when it resumes; the round that sent them had no answer
    killed    refused at once (a connection error), keys gone; restart(i) brings it back empty
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, Callable, Optional

from .._core.validation import non_negative_seconds
from .._engines.resp import ReplyError
from ._store import MemoryStore, Reply

# A command sent to a master and who waits for its reply: (args, on_reply or None).
Sent = tuple[Sequence[bytes], Optional[Callable[[Reply, int], None]]]


class MemoryMaster:
    """One master of a MemoryMasters group; what hiredlock reads from it when it is passed as a
    master (a MasterSpec's `memory`)."""

    hiredlock_memory_master = True  # (how hiredlock._core.masters tells one, without an import)

    def __init__(self, group: MemoryMasters, index: int) -> None:
        self.group = group
        self.index = index
        self.store = MemoryStore()
        self.store.on_publish = group.publish
        self.stopped = False
        self.killed = False
        self.delay_ns = 0
        self.backlog: list[Sent] = []

    def engine_for(self, masters: Sequence[Any]) -> type:
        """The engine class of a client of these masters (their MasterSpecs), once they are
        checked to be memory masters of one group."""
        from ._engine import MemoryEngine, one_group

        one_group(masters)
        return MemoryEngine

    def notices(self, session: Any, asynchronous: bool) -> Any:
        """Release notices of a client of these masters (see _notices.py)."""
        from ._notices import LoopMemoryNotices, ThreadMemoryNotices

        if asynchronous:
            return LoopMemoryNotices(self.group, session)
        return ThreadMemoryNotices(self.group, session)

    def send(self, args: Sequence[bytes], on_reply: Optional[Callable[[Reply, int], None]]) -> Any:
        """Runs a command as the master is now (call with the group's lock held): its reply, or
        STOPPED (on_reply gets it when the master resumes), or KILLED."""
        if self.killed:
            return KILLED
        if self.stopped:
            self.backlog.append((args, on_reply))
            return STOPPED
        return self.store.execute(args, self.group.now_ms())

    def __str__(self) -> str:
        return f"memory://{self.group.name}/{self.index}"

    def __repr__(self) -> str:
        return f"<MemoryMaster {self}>"


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


STOPPED = _Marker("STOPPED")
KILLED = _Marker("KILLED")

_names = iter(range(1, 2**62))


class MemoryMasters:
    """N masters in memory (iterate over it, or index it, to get each MemoryMaster); pass it as
    the masters of a Redlock or an AsyncRedlock. The faults are on the group:

    stop(i) / resume(i)   master i answers nothing until resumed, then runs what it was sent
    kill(i) / restart(i)  master i refuses connections and loses its keys; restart brings it
                          back, empty
    delay(i, seconds)     master i's replies come `seconds` late (0: on time again)
    advance(seconds)      the masters' clock moves on: keys expire as if that time had passed
    """

    def __init__(
        self,
        n: int = 5,
        *,
        clock: Optional[Callable[[], int]] = None,
        sleep: Optional[Callable[[float], None]] = None,
    ) -> None:
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"n must be an int, not {type(n).__name__}")
        if n < 1:
            raise ValueError(f"n must be at least 1, got {n}")
        if clock is not None and not callable(clock):
            raise TypeError("clock must be a callable returning nanoseconds")
        self.clock: Callable[[], int] = clock if clock is not None else time.monotonic_ns
        self.sleep: Callable[[float], None] = sleep if sleep is not None else time.sleep
        self.name = f"masters-{next(_names)}"
        self.lock = threading.RLock()
        self._start_ns = self.clock()
        self._start_ms = int(time.time() * 1000)
        self._advanced_ms = 0
        self._listeners: weakref.WeakSet[Any] = weakref.WeakSet()
        self._masters = tuple(MemoryMaster(self, i) for i in range(n))

    # -- the masters --------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._masters)

    def __iter__(self) -> Iterator[MemoryMaster]:
        return iter(self._masters)

    def __getitem__(self, index: int) -> MemoryMaster:
        return self._masters[self._index(index)]

    def __repr__(self) -> str:
        return f"<MemoryMasters {self.name}: {len(self)} masters>"

    def now_ms(self) -> int:
        """The masters' clock, in ms (what TIME says and keys expire by)."""
        return self._start_ms + (self.clock() - self._start_ns) // 1_000_000 + self._advanced_ms

    def keys(self, index: int) -> list[bytes]:
        """The keys master `index` holds now (not expired); [] while it is killed."""
        master = self[index]
        with self.lock:
            return [] if master.killed else master.store.keys(self.now_ms())

    def execute(self, index: int, *args: Any) -> Reply:
        """Runs one command on master `index` now (str or int arguments are encoded), for a
        test's own look at it: e.g. execute(0, "PTTL", key). A stopped or killed master gives a
        ReplyError saying so (the command is not run)."""
        master = self[index]
        words = [arg if isinstance(arg, bytes) else str(arg).encode() for arg in args]
        with self.lock:
            if master.killed or master.stopped:
                state = "killed" if master.killed else "stopped"
                return ReplyError(f"ERR {master} is {state}")
            return master.store.execute(words, self.now_ms())

    # -- faults --------------------------------------------------------------------------------

    def stop(self, index: int) -> None:
        """Master `index` answers nothing until resume(index) (what it is sent meanwhile waits,
        and runs then)."""
        with self.lock:
            self[index].stopped = True

    def resume(self, index: int) -> None:
        """Ends stop(index): the master runs what it was sent meanwhile, in order."""
        master = self[index]
        with self.lock:
            master.stopped = False
            backlog, master.backlog = master.backlog, []
            for args, on_reply in backlog:
                if master.killed or master.stopped:
                    break
                reply = master.store.execute(args, self.now_ms())
                if on_reply is not None:
                    on_reply(reply, master.delay_ns)

    def kill(self, index: int) -> None:
        """Master `index` goes down: its keys (and what it was sent while stopped) are lost, and
        it refuses connections until restart(index)."""
        master = self[index]
        with self.lock:
            master.killed = True
            master.stopped = False
            master.backlog = []
            master.store.flushall()

    def restart(self, index: int) -> None:
        """Brings a killed master back, empty (a restart without persistence). A running
        master restarted loses its keys too."""
        master = self[index]
        with self.lock:
            master.store.flushall()
            master.killed = False
            master.stopped = False
            master.backlog = []

    def delay(self, index: int, seconds: float) -> None:
        """Master `index`'s replies come `seconds` late from now on (0: on time again). The
        commands run when they are sent; their replies are late, as on a slow network."""
        seconds = non_negative_seconds(seconds, "seconds")
        with self.lock:
            self[index].delay_ns = int(seconds * 1e9)

    def advance(self, seconds: float) -> None:
        """Moves the masters' clock on by `seconds`: keys expire as if that time had passed
        (the clients' clock does not move: a lock's validity is the client's to judge)."""
        seconds = non_negative_seconds(seconds, "seconds")
        with self.lock:
            self._advanced_ms += int(seconds * 1000)

    # -- release notices -----------------------------------------------------------------------

    def listen(self, listener: Any) -> None:
        """listener.notice(channel) is called on every PUBLISH of these masters (held weakly)."""
        with self.lock:
            self._listeners.add(listener)

    def subscribers(self, channel: bytes) -> int:
        """How many clients of these masters have a waiter on `channel` now."""
        return sum(listener.waiting(channel) for listener in list(self._listeners))

    def publish(self, channel: bytes, message: bytes) -> int:
        listeners = list(self._listeners)
        for listener in listeners:
            listener.notice(channel)
        return len(listeners)

    def _index(self, index: int) -> int:
        if isinstance(index, bool) or not isinstance(index, int):
            raise TypeError(f"index must be an int, not {type(index).__name__}")
        if not -len(self._masters) <= index < len(self._masters):
            raise IndexError(f"index {index} is out of range for {len(self._masters)} masters")
        return index % len(self._masters)


def memory_masters(
    n: int = 5,
    *,
    clock: Optional[Callable[[], int]] = None,
    sleep: Optional[Callable[[float], None]] = None,
) -> MemoryMasters:
    """N masters in memory, for Redlock(masters) or AsyncRedlock(masters) in a test (see
    MemoryMasters for the faults). clock: a callable giving nanoseconds (default
    time.monotonic_ns) that the masters' time and the memory engine's rounds follow; sleep: how
    a blocking round waits for a late reply (default time.sleep; with a clock of one's own, a
    callable that moves it on). The asyncio driver times rounds with time.monotonic_ns: an
    AsyncRedlock needs the default clock."""
    return MemoryMasters(n, clock=clock, sleep=sleep)
