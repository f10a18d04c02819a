"""The invariants, checked after every event of a world (validity only shrinks between events, so
that is every virtual instant), and at its end.

- never two holders of a mutex or fair lock with validity left, never more than K permits, never
  a writer with anyone else (a holder: the library's own lock object with its token, not lost,
  validity left on the virtual clock);
- a holder's keys outlive its validity on a quorum of masters (checked at the last instant of
  its validity: what lets a second client win while the first still counts on the lock);
- fence values strictly increase across the holders of a name;
- fair grants follow request order in a world with no fault;
- no round carrying a released token begins after that release began (a clean-up excepted);
- when every client has ended, no key is left but the fence counters: at once in a world with no
  fault, and in any world once the longest ttl (or waiting window) has passed on every master.
"""

from __future__ import annotations

from typing import Any, Optional

from hiredlock._core import scripts as _scripts
from hiredlock._core.keys import NameKeys
from hiredlock._core.requests import Cleanup, Pause, SetNx

from .world import MS, World

RELEASES = {
    s.sha
    for s in (
        _scripts.RELEASE,
        _scripts.FAIR_RELEASE,
        _scripts.WRITE_RELEASE,
        _scripts.READ_RELEASE,
    )
}


class Violation(AssertionError):
    def __init__(self, seed: int, what: str) -> None:
        super().__init__(f"seed {seed}: {what}")
        self.seed = seed
        self.what = what


class Ledger:
    """What the checks know of one world: the lock objects of live lifetimes per name."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.kinds: dict[bytes, tuple[str, int]] = {}  # name -> (kind, permits)
        self.holders: dict[bytes, set[Any]] = {}  # name -> lock objects that may hold it
        self.fences: dict[bytes, int] = {}
        self.released: set[tuple[bytes, bytes]] = set()  # (first key, token)
        self.waiting: dict[Any, tuple[int, int]] = {}  # fair call -> (first sent, first answered)
        self.faulty = False  # any fault (fair order is checked only without)
        self.lossy = False  # a fault that loses messages or keys (an unlock may never land)
        self.keys: set[bytes] = set()  # every key the world's names may use
        self.longest_ms = 0
        self.dirty: set[bytes] = set()
        world.checks.append(self.check)

    def fail(self, what: str) -> None:
        raise Violation(self.world.seed, what)

    # -- holders -------------------------------------------------------------------------------

    def add(self, name: bytes, lock: Any) -> None:
        self.holders.setdefault(name, set()).add(lock)
        self.dirty.add(name)

    def discard(self, name: bytes, lock: Any) -> None:
        self.holders.get(name, set()).discard(lock)

    def touched(self, name: bytes) -> None:
        self.dirty.add(name)

    def check(self) -> None:
        """Holders of each name changed since the last event (or whose validity ends now)."""
        if not self.dirty:
            return
        now = self.world.now
        for name in self.dirty:
            kind, permits = self.kinds[name]
            valid = [
                lock
                for lock in self.holders.get(name, ())
                if lock._token is not None and not lock._lost and lock._valid_until_ns > now
            ]
            if kind == "semaphore":
                if len(valid) > permits:
                    self.fail(f"{len(valid)} holders of semaphore {name!r} of {permits} permits")
                if len({lock._index for lock in valid}) < len(valid):
                    self.fail(f"two holders of one permit of semaphore {name!r}")
            elif kind == "rw":
                writers = [lock for lock in valid if lock._kind == "WriteLock"]
                if writers and len(valid) > 1:
                    self.fail(f"a writer of {name!r} with {len(valid) - 1} other holders")
            elif len(valid) > 1:
                self.fail(f"{len(valid)} holders of {kind} {name!r} with validity left")
        self.dirty.clear()

    def acquired(self, name: bytes, lock: Any, fenced: bool) -> None:
        self.add(name, lock)
        if fenced:
            fence = lock._fence
            if fence is None or fence <= self.fences.get(name, 0):
                self.fail(f"fence {fence} of {name!r} after {self.fences.get(name)}")
            self.fences[name] = fence
        self.watch_validity(name, lock)

    def watch_validity(self, name: bytes, lock: Any) -> None:
        """At the last instant of the lock's validity, its keys must be on a quorum."""
        until = lock._valid_until_ns
        token = lock._token
        if token is None or lock._lost:
            return

        def last_instant() -> None:
            if lock._token != token or lock._lost or lock._valid_until_ns != until:
                return  # released, lost, or extended (a new watch was set)
            on = sum(self.keeps(master, lock, token) for master in self.world.masters)
            if on < self.world.quorum:
                self.fail(
                    f"{lock._kind} {name!r} has validity left but its key on {on} masters only"
                )

        self.world.at(until - 1, last_instant)

    def keeps(self, master: Any, lock: Any, token: bytes) -> bool:
        """Whether `master` holds `lock`'s key with `token` now (a crashed one counts as it was:
        it cannot give the key to another before it restarts, after the longest ttl)."""
        if lock._kind == "ReadLock":
            score = master.store.execute([b"ZSCORE", lock._key, token], master.clock_ms())
            # (nil: not there; a reply error, WRONGTYPE: the key holds something else)
            return isinstance(score, bytes) and float(score) > master.clock_ms()
        return master.store.execute([b"GET", lock._key], master.clock_ms()) == token

    # -- rounds --------------------------------------------------------------------------------

    def request(self, request: Any) -> None:
        """A round begins: none carries a token whose release began (but a clean-up)."""
        if type(request) is Cleanup or type(request) is Pause:
            return
        if type(request) is SetNx:
            pairs = set(zip(request.keys, request.tokens))
        else:
            pairs = {(argv[0], arg) for argv in request.argvs for arg in argv[1:] if len(arg) == 40}
        for key, token in pairs & self.released:
            self.fail(f"a round for {key!r} with token {token[:8]!r}... after its release")
        if type(request) is not SetNx and request.sha in RELEASES:
            self.released |= pairs

    # -- fair order ----------------------------------------------------------------------------

    def fair_granted(self, name: bytes, call: Any) -> None:
        if self.faulty:
            return
        sent = self.waiting.pop(call)[0]
        for other, (other_sent, other_answered) in self.waiting.items():
            if other[0] == name and other_answered and other_answered < sent:
                self.fail(
                    f"fair lock {name!r} granted to a call made at {sent / MS:.3f} ms before one "
                    f"waiting since {other_sent / MS:.3f} ms"
                )

    # -- the end -------------------------------------------------------------------------------

    def left(self) -> list[tuple[int, bytes]]:
        # (the fence counter and the read-write marks of any name: their keys up to the name's
        # tag, as NameKeys lays them out)
        probe = NameKeys(b"", b"x")
        tail = len(b"{x}")
        fence = probe.fence[:-tail]
        marks = tuple(key[:-tail] for key in probe.rw[2:])
        out = []
        for master in self.world.masters:
            for key in master.store.keys(master.clock_ms()):
                if key.startswith(fence):
                    continue
                if key.startswith(marks):
                    continue  # (a refused reader's or writer's mark lasts its window)
                out.append((master.index, key))
        return out

    def at_end(self) -> Optional[str]:
        """Checks the keys left once every client ended; then lets the longest ttl pass."""
        world = self.world
        if not self.lossy:
            left = self.left()
            if left:
                self.fail(f"keys left when every client ended, no message lost: {left}")
        world.now += int(self.longest_ms * 1.02 * MS) + 3 * MS
        left = self.left()
        if left:
            self.fail(f"keys left past their ttl after every client ended: {left}")
        return None
