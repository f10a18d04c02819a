"""The memory engine: the engine contract (hiredlock._engines.contract) on masters in memory.

A third engine for tests, with no socket: a round's commands run on the MemoryMasters at once (see
_masters.py for what a stopped, killed or delayed master does with them), and the round waits only
for replies that are late (a delayed master's, or a resumed master's) or never come (a stopped
master's). Its Round has no fds: a driver waits until next_deadline_ns and calls on_deadline (the
asyncio driver, aio/_driver.py, does so with its timer; run() here sleeps with the group's sleep).
Votes are counted by the python engine's Votes (_engines/round.py), on the group's clock.

The stop rules are contract.py's, reduced by what memory masters do not have:
    - no connects: no master is ever "new", so there is no connect bound C, the round ends at D
      (after one more look, rule 1), and rule 3 does not arise; a killed master votes
      CONN_ERROR at once, as a refused connect does;
    - no lagging or backoff (no MasterPolicy): every master keeps up, and a best-effort round
      waits, like a decided wait_all round, for the masters that owe it until D;
    - every script goes as EVAL (the contract's EVAL on a connection that has not run the
      script yet: memory masters keep no per-connection state), so NOSCRIPT and the late EVAL
      of Script.acquires do not arise;
    - one backlog per master, shared by every engine, keeps commands in the order they were
      sent, so owes_replies() is False: a lock's next rounds may go out on any engine.
Replies still owed when a round ends are dropped: their commands ran on the master (or run when
it resumes), as on a server.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from typing import Any, Callable, Optional

from .._core.masters import MasterSpec
from .._core.requests import RoundRequest, SetNx
from .._core.scripts import quorum as _quorum_of
from .._engines.contract import RoundResult
from .._engines.master import CONN_ERROR, KIND_SCRIPT, KIND_SET
from .._engines.votes import Votes
from ._masters import KILLED, STOPPED, MemoryMaster, MemoryMasters
from ._store import Reply


class MemoryRound:
    """One round on memory masters (the Round Protocol of _engines/contract.py), with no fds."""

    before_close: Optional[Callable[[int], None]]

    def __init__(
        self, group: MemoryMasters, kind: int, votes: Votes, deadline: int, wait_all: bool
    ) -> None:
        self.group = group
        self.kind = kind
        self.votes = votes
        self.deadline = deadline  # D (contract: Terms)
        self.wait_all = wait_all
        self.before_close = None
        self.over = False  # D passed (and the look at D was taken)
        self.ended_ns = 0
        # replies on their way: (due ns, sequence, key index, master index, reply)
        self.arriving: list[tuple[int, int, int, int, Reply]] = []
        self.owed = [0] * len(votes.codes[0]) if votes.codes else []  # replies owed per master
        self._sequence = 0

    # -- what a driver calls (contract: Round) -------------------------------------------------

    @property
    def next_deadline_ns(self) -> int:
        if self.arriving and self.arriving[0][0] < self.deadline:
            return self.arriving[0][0]
        return self.deadline

    def fds_wanted(self) -> dict[int, int]:
        return {}

    def on_ready(self, fd: int, readable: object, writable: object) -> None:
        return None  # (no sockets)

    def on_deadline(self, now_ns: int) -> None:
        with self.group.lock:
            if self.over or self.ended_ns:
                return
            self._arrive(now_ns)
            if now_ns >= self.deadline:
                self.over = True  # (contract: extend, rule 1: what is there at D counts)

    def finished(self) -> bool:
        """(contract: stop, before D; there is no "from D to C" without connects)"""
        with self.group.lock:
            if self.over or not any(self.owed):
                return True
            return not self.votes.undecided and not self.wait_all

    def end(self) -> None:
        """(contract: account) The replies still owed are dropped."""
        with self.group.lock:
            if not self.ended_ns:
                self.ended_ns = self.group.clock()
                self.arriving = []

    def break_off(self) -> None:
        self.end()  # (nothing of a memory master is left in an unknown state)

    # -- replies -------------------------------------------------------------------------------

    def reply(self, key: int, master: int, reply: Reply, delay_ns: int) -> None:
        """A master's reply to the command for `key`, reaching the round `delay_ns` from now
        (with the group's lock held)."""
        if self.ended_ns:
            return
        if delay_ns <= 0:
            self._count(key, master, reply)
            return
        self._sequence += 1
        due = self.group.clock() + delay_ns
        heapq.heappush(self.arriving, (due, self._sequence, key, master, reply))

    def later(self, key: int, master: int) -> Callable[[Reply, int], None]:
        """What a stopped master calls with the reply when it resumes."""
        return lambda reply, delay_ns: self.reply(key, master, reply, delay_ns)

    def _arrive(self, now_ns: int) -> None:
        arriving = self.arriving
        while arriving and arriving[0][0] <= now_ns:
            _, _, key, master, reply = heapq.heappop(arriving)
            self._count(key, master, reply)

    def _count(self, key: int, master: int, reply: Reply) -> None:
        self.owed[master] -= 1
        self.votes.count(key, master, self.kind, reply)


def one_group(masters: Sequence[MasterSpec]) -> list[MemoryMaster]:
    """The memory masters the specs name: TypeError where one is not a memory master,
    ValueError when they come from more than one memory_masters() group."""
    found: list[MemoryMaster] = []
    for index, spec in enumerate(masters):
        memory = spec.memory
        if not isinstance(memory, MemoryMaster):
            raise TypeError(f"masters[{index}] is not a memory master ({spec})")
        found.append(memory)
    if len({id(master.group) for master in found}) > 1:
        raise ValueError("memory masters must all come from one memory_masters() group")
    return found


class MemoryEngine:
    """The engine contract (contract.py's Engine) on the masters of one MemoryMasters group."""

    name = "memory"

    def __init__(
        self, masters: Sequence[MasterSpec], quorum: Optional[int] = None, router: Any = None
    ) -> None:
        if router is not None:  # (masters in memory are never a cluster's)
            raise TypeError("the memory engine routes nothing: its masters are in memory")
        found = one_group(masters)
        self._masters = found
        self._group = found[0].group if found else None
        self._quorum = quorum if quorum is not None else _quorum_of(len(found))

    def run(self, request: RoundRequest) -> list[RoundResult]:
        """Runs a round to its end, sleeping (the group's sleep) until a late reply is due."""
        rnd = self.begin(request)
        group = rnd.group
        try:
            while not rnd.finished():
                now = group.clock()
                wait_ns = rnd.next_deadline_ns - now
                if wait_ns > 0:
                    group.sleep(wait_ns / 1e9)
                else:
                    rnd.on_deadline(now)
        except BaseException:
            rnd.break_off()
            raise
        return self.finish(rnd)

    def begin(self, request: RoundRequest) -> MemoryRound:
        """Sends the round's commands to every master (they run now, or wait in a stopped
        master's backlog); the replies that are not late are counted before this returns."""
        group = self._group
        if group is None:
            raise ValueError("no masters")
        commands: list[tuple[bytes, ...]]
        if type(request) is SetNx:
            keys, tokens = request.keys, request.tokens
            if len(keys) != len(tokens):
                raise ValueError("SetNx needs one token per key")
            ttl = b"%d" % int(request.ttl_ms)
            commands = [(b"SET", key, token, b"NX", b"PX", ttl) for key, token in zip(keys, tokens)]
            kind, wait_all, want_values = KIND_SET, False, False
        else:
            count = b"%d" % request.numkeys
            source = request.source
            commands = [(b"EVAL", source, count, *argv) for argv in request.argvs]
            kind, wait_all, want_values = KIND_SCRIPT, request.wait_all, request.want_values
        n = len(self._masters)
        with group.lock:
            t0 = group.clock()
            votes = Votes(len(commands), n, self._quorum, t0, want_values, group.clock)
            rnd = MemoryRound(
                group, kind, votes, t0 + int(request.timeout_ms * 1_000_000), wait_all
            )
            rnd.owed = [0] * n
            for master in self._masters:
                self._send(rnd, master, commands)
        return rnd

    def _send(self, rnd: MemoryRound, master: MemoryMaster, commands: list[Any]) -> None:
        index = master.index
        for key, args in enumerate(commands):
            rnd.owed[index] += 1
            result = master.send(args, rnd.later(key, index))
            if result is KILLED:
                rnd.owed[index] = 0
                rnd.votes.vote_all(index, CONN_ERROR, f"{master} is down (killed)")
                return
            if result is not STOPPED:
                rnd.reply(key, index, result, master.delay_ns)

    def finish(self, rnd: Any) -> list[RoundResult]:
        rnd.end()
        return rnd.votes.results(rnd.ended_ns)  # type: ignore[no-any-return]

    def owes_replies(self) -> bool:
        return False  # (see the module doc: one backlog per master keeps the order)

    def owed_fds(self) -> list[int]:
        return []  # (no connection)

    def closes(self) -> int:
        return 0  # (no connection)

    def close(self) -> None:
        return None
