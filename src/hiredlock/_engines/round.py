"""The pure-Python engine's round: one call's commands, its votes, and the masters it is still
doing I/O with (the native engine's part of the same name: _native/round.pxi).

One round: every command for every master is written before any reply is read (a connection
opened in the round gets its login, AUTH and SELECT, pipelined in front of them); then a driver
waits on all sockets at once, until the stop rules of _engines/contract.py end it. Sockets are
non-blocking and every wait is for what is left of the round, so a round's time is bounded as a
whole, however a master sends its bytes. The round itself never waits: the blocking driver is
run_blocking, below; the asyncio one is aio/_driver.py.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Optional

from .._core.scripts import MAX_STALE_REPLIES
from .connect import CONNECT_TIMED_OUT, TLS_HANDSHAKE_TIMED_OUT
from .contract import RoundResult
from .link import CONNECTING, READY, Broken, handshake_events
from .master import (
    ASKING,
    ASKING_COMMAND,
    CONN_ERROR,
    ERROR,
    LOGIN,
    PENDING,
    REDIRECTS,
    Master,
)
from .master_policy import MasterPolicy, MasterReport
from .poller import POLLIN, POLLOUT, new_poller
from .resp import NOT_READY, ProtocolError, ReplyError, ReplyTooLarge
from .routing import MAX_REDIRECTS
from .script_commands import Evals
from .votes import Votes


class Round:
    """One call: its commands, its votes, and the masters it is still doing I/O with.

    A round never waits: a driver feeds it what happened (the Round Protocol of
    _engines/contract.py), so one round serves the blocking driver (run_blocking, below) and the
    asyncio one (aio/_driver.py) alike. For a driver that polls, `poller` is a poll object
    registered with exactly fds_wanted().

    What it learns about each master goes to the engine's MasterPolicy at its end, as the masks
    of a MasterReport (bit i: master i), only when one of them is not 0.
    """

    __slots__ = (
        "active",
        "batch",
        "before_close",
        "best_effort",
        "caught_up",
        "commands",
        "deadline",
        "ended_ns",
        "evals",
        "failed",
        "fresh_deadline",
        "item_evals",
        "kind",
        "lagged",
        "lagging",
        "masters",
        "next_deadline_ns",
        "over",
        "past_deadline",
        "policy",
        "poller",
        "readonly",
        "reasons",
        "redirects",
        "router",
        "sha",
        "unit",
        "unreached",
        "up",
        "votes",
        "wait_all",
    )

    def __init__(
        self,
        masters: Sequence[Master],
        policy: Optional[MasterPolicy],
        kind: int,
        commands: list[bytes],
        evals: Optional[Evals],
        sha: Optional[bytes],
        votes: Votes,
        deadline: int,
        fresh_deadline: int,
        wait_all: bool,
        best_effort: bool,
    ) -> None:
        self.masters = masters
        self.policy = policy
        self.kind = kind
        self.commands = commands
        self.batch = commands[0] if len(commands) == 1 else b"".join(commands)
        self.evals = evals  # scripts only
        self.sha = sha
        self.votes = votes
        self.deadline = deadline  # masters connected before the round
        self.fresh_deadline = fresh_deadline  # masters whose connection opens in this round
        self.next_deadline_ns = deadline  # then fresh_deadline, once deadline has passed
        self.past_deadline = False
        self.over = False  # its last deadline passed
        self.ended_ns = 0  # when end() ran
        self.wait_all = wait_all
        self.best_effort = best_effort  # (contract: best effort)
        self.poller = new_poller()
        self.before_close: Optional[Callable[[int], None]] = None
        # fd -> master, for masters this round still does I/O with: connecting, writing, or owed
        # replies of this round
        self.active: dict[int, Master] = {}
        # the policy's lagging masks at the start, and what the round reports (MasterReport)
        self.lagging = 0
        self.failed = self.unreached = self.up = self.lagged = self.caught_up = 0
        self.readonly = 0
        self.reasons: Optional[dict[int, tuple[int, str]]] = None
        self.router: Any = None  # the engine's routing table (see _engines/routing.py), if any
        self.redirects: Optional[dict[int, int]] = None  # key -> times sent elsewhere
        # names per command: 1, or a batched script's SCRIPT_BATCH_ITEMS (command c carries
        # names c * unit onwards); a batched round's names sent one by one (to an unbatched
        # master) go as EVAL of their own script (item_evals), owed as -1 - name
        self.unit = 1
        self.item_evals: Optional[Evals] = None

    # -- what a driver calls (contract: Round) ---------------------------------------------------

    def fds_wanted(self) -> dict[int, int]:
        return {fd: master.events_wanted() for fd, master in self.active.items()}

    def finished(self) -> bool:
        return self.over or self._stop()

    def on_ready(self, fd: int, readable: Any, writable: Any) -> None:
        master = self.active.get(fd)
        if master is None:
            return
        if master.state == CONNECTING:
            self._connected(master)
            return
        if writable and master.unsent is not None and not self._flush(master):
            return
        if readable and not self._read(master):
            return
        if not master.todo and master.unsent is None:
            self.retire(master)

    def on_deadline(self, now_ns: int) -> None:
        if not self.over and now_ns >= self.next_deadline_ns:
            self._extend()

    def end(self) -> None:
        if not self.ended_ns:
            self._account()

    def break_off(self) -> None:
        """Instead of end() after an exception: the connections of masters not accounted yet go
        (what they owe is unknown)."""
        for master in self.masters:
            if master.busy:
                master.drop()
                master.busy = False

    # -- the stop rules (contract: wanted, stop, extend, account) -------------------------------

    def _stop(self) -> bool:
        past = self.past_deadline
        owed = owed_waited = False
        for master in self.active.values():  # (contract: wanted)
            if (past and not master.fresh) or not (master.todo or master.state == CONNECTING):
                continue
            owed = True
            if master.waited:
                owed_waited = True
                break
        if not owed:
            return True
        if not self.votes.undecided or self.best_effort:
            return not self.wait_all or not owed_waited
        return past and not self._fresh_can_decide()

    def _fresh_can_decide(self) -> bool:
        votes = self.votes
        fresh = [master.column for master in self.active.values() if master.fresh]
        for codes, decided, oks in zip(votes.codes, votes.decided_at, votes.oks):
            if not decided and oks + sum(codes[i] == PENDING for i in fresh) >= votes.q:
                return True
        return False

    def _extend(self) -> None:
        for fd, event in self.poller.poll(0):
            self.on_ready(fd, event & ~POLLOUT, event & POLLOUT)
        if self.past_deadline or self.fresh_deadline <= self.deadline or self.best_effort:
            self.over = True
        else:
            self.past_deadline = True
            self.next_deadline_ns = self.fresh_deadline

    def _account(self) -> None:
        """Once; clears each master's busy mark, last (see master.py's module doc)."""
        end = self.ended_ns = time.monotonic_ns()
        for master in self.masters:
            if master.sock is not None:
                if master.state == CONNECTING:
                    if end >= master.connect_deadline:
                        # (a TLS master has its channel once the TCP connect is confirmed)
                        why = (
                            CONNECT_TIMED_OUT if master.channel is None else TLS_HANDSHAKE_TIMED_OUT
                        )
                        self.votes.explain_pending(master.column, why, master.carries)
                        master.drop()
                        self.failure(master, end, why, True)
                elif master.todo:
                    self._abandon(master, end)
        policy = self.policy
        if policy is not None and (
            self.failed | self.up | self.lagged | self.caught_up | self.readonly
        ):
            drop = policy.settle(
                MasterReport(
                    self.failed,
                    self.unreached,
                    self.up,
                    self.lagged,
                    self.caught_up,
                    self.readonly,
                    self.reasons or {},
                )
            )
            for master in self.masters:
                if drop & master.bit and master.sock is not None:
                    if self.before_close is not None:
                        self.before_close(master.fd)
                    master.drop()
        for master in self.masters:
            master.busy = False

    # -- bookkeeping -----------------------------------------------------------------------------

    def watch(self, master: Master) -> None:
        # events_wanted, written out: this runs for every master of every round
        if master.state == CONNECTING:
            events = POLLOUT if master.channel is None else handshake_events(master.channel)
        else:
            events = POLLIN if master.unsent is None else POLLIN | POLLOUT
        self.poller.register(master.fd, events)
        self.active[master.fd] = master

    def retire(self, master: Master) -> None:
        if self.active.pop(master.fd, None) is not None:
            self.poller.unregister(master.fd)

    def fail(self, master: Master, code: int, detail: str, unreached: bool = False) -> None:
        """The master failed in this round: each key it has not answered gets this vote."""
        self.votes.vote_all(master.column, code, detail, master.carries)
        self.retire(master)
        if self.before_close is not None and master.sock is not None:
            self.before_close(master.fd)
        master.drop()
        self.failure(master, time.monotonic_ns(), detail, unreached)

    def failure(self, master: Master, at: int, reason: str, unreached: bool) -> None:
        """Reports a failed connection (already dropped) to the policy, at the round's end.

        unreached: the failure came before anything was written to the master (name lookup,
        connect)."""
        bit = master.bit
        self.failed |= bit
        if unreached:
            self.unreached |= bit
        if self.reasons is None:
            self.reasons = {}
        self.reasons[master.index] = (at, reason)

    # -- I/O -------------------------------------------------------------------------------------

    def queue(self, master: Master) -> None:
        """Writes the round's commands (after the login on a new connection) to a master."""
        master.unqueued = False
        sha = self.sha  # (given with evals: a script's round)
        carries = master.carries
        # a batched round's names on a master that takes no batch (see Master.unbatched): each
        # name's script as EVAL of its own, owed as -1 - name
        one_by_one = self.unit > 1 and master.unbatched
        if one_by_one:
            data = self.item_evals.all()  # type: ignore[union-attr]
        elif self.evals is not None and sha is not None and sha not in master.scripts:
            # not sent on this connection yet: EVAL (see Master.scripts)
            evals = self.evals
            data = evals.all() if carries is None else b"".join(evals[k] for k in carries)
            master.scripts.add(sha)
        elif carries is None:
            data = self.batch
        else:
            data = b"".join([self.commands[k] for k in carries])
        owed = master.owed
        if master.login_due:
            master.login_due = False
            data = master.login + data
            owed.extend([LOGIN] * master.n_login)
        if carries is not None:
            owed.extend(carries)
            master.todo = len(carries)
        elif one_by_one:
            names = len(self.votes.codes)
            owed.extend(range(-1, -1 - names, -1))
            master.todo = names
        elif len(self.commands) == 1:
            owed.append(0)
            master.todo = 1
        else:
            owed.extend(range(len(self.commands)))
            master.todo = len(self.commands)
        try:
            master.push(data)
        except Broken as exc:
            self.fail(master, CONN_ERROR, str(exc))
            return
        self.watch(master)

    def _connected(self, master: Master) -> None:
        """Finishes a non-blocking connect (and a TLS master's handshake, step by step); then the
        login and the round's commands go."""
        try:
            if not master.connected():
                self.watch(master)  # (what the handshake waits for now)
                return
        except Broken as exc:
            self.fail(master, CONN_ERROR, str(exc), unreached=True)
            return
        master.state = READY
        self.up |= master.bit
        # connected in this round (opened in an earlier one, maybe): its login and first
        # commands have the connect bound
        master.fresh = master.waited = True
        master.deadline = self.fresh_deadline
        self.retire(master)
        self.queue(master)

    def _flush(self, master: Master) -> bool:
        """Writes more of what the socket did not take; False when the connection failed."""
        try:
            master.flush()
        except Broken as exc:
            self.fail(master, CONN_ERROR, str(exc))
            return False
        if master.unsent is None:
            self.poller.register(master.fd, POLLIN)
        return True

    def _read(self, master: Master) -> bool:
        """Reads what arrived and counts every whole reply; False when the connection failed."""
        try:
            data = master.receive()
        except Broken as exc:
            self.fail(master, CONN_ERROR, str(exc))
            return False
        if not data:
            return True  # nothing yet (TLS records only, say)
        reader = master.reader
        reader.feed(data)
        owed = master.owed
        votes = self.votes
        while True:
            try:
                reply = reader.get()
            except ReplyTooLarge as exc:
                self.fail(master, ERROR, str(exc))
                return False
            except ProtocolError as exc:
                self.fail(master, ERROR, f"protocol error: {exc}")
                return False
            if reply is NOT_READY:
                return True
            master.heard = True
            if not owed:
                self.fail(master, ERROR, "protocol error: a reply nobody asked for")
                return False
            entry = owed.popleft()
            if type(entry) is int:
                master.todo -= 1
                if self.lagging & master.bit:
                    self.caught_up |= master.bit  # every earlier reply came first
                if self.sha is not None and entry >= 0:  # (-1 - k: a name sent on its own)
                    if type(reply) is not ReplyError:
                        master.scripts.add(self.sha)
                    elif reply.text.startswith("NOSCRIPT"):
                        # The script cache was flushed: send the source, and wait for that reply.
                        master.scripts.discard(self.sha)
                        if not self._send(master, self.evals[entry]):  # type: ignore[index]
                            return False
                        owed.append(entry)
                        master.todo += 1
                        continue
                if type(reply) is ReplyError and reply.text.startswith("READONLY"):
                    self.readonly |= master.bit  # (master_policy: READONLY)
                if (
                    type(reply) is ReplyError
                    and self.router is not None
                    and reply.text.startswith(REDIRECTS)
                    and self._redirect(master, entry, reply.text)
                ):
                    continue  # (its vote comes from the node it was sent to)
                if self.unit == 1:
                    votes.count(entry, master.column, self.kind, reply)
                elif entry < 0:  # a batched round's name -1 - entry, sent on its own (as EVAL)
                    votes.count(-1 - entry, master.column, self.kind, reply)
                elif not self._count_batched(master, entry, reply):
                    return False
            elif type(entry) is tuple:  # (ASKING, key): an error to it is the key's vote
                if type(reply) is ReplyError:
                    votes.vote(entry[1], master.column, ERROR, reply.text)
            elif entry is LOGIN:
                if type(reply) is ReplyError:
                    self.fail(master, ERROR, reply.text)
                    return False
            elif (
                entry is not None
                and type(reply) is ReplyError
                and reply.text.startswith("NOSCRIPT")
            ):
                # owed to an abandoned round: its script still runs there
                if not self._send(master, entry):
                    return False
                owed.append(None)

    def _count_batched(self, master: Master, entry: int, reply: Any) -> bool:
        """The reply to a batched round's command `entry` (its NOSCRIPT is _read's, as any
        script's): CROSSSLOT, or each of its names' votes. False when the connection failed."""
        votes = self.votes
        first = entry * self.unit
        names = min(self.unit, len(votes.codes) - first)
        if type(reply) is ReplyError and reply.text.startswith("CROSSSLOT"):
            # A cluster-mode server: none of the command's names ran. Each goes on its own,
            # now and in the later rounds.
            master.unbatched = True
            item_evals = self.item_evals
            assert item_evals is not None
            if not self._send(master, b"".join(item_evals[k] for k in range(first, first + names))):
                return False
            master.owed.extend(range(-1 - first, -1 - first - names, -1))
            master.todo += names
        elif votes.count_batch(first, names, master.column, reply):
            self.readonly |= master.bit  # (master_policy: READONLY)
        return True

    def _redirect(self, master: Master, key: int, text: str) -> bool:
        """A MOVED or ASK reply to `key`'s command: sent, in this round, to the link the router
        names (see _engines/routing.py), when that link is connected and the key has not been
        sent elsewhere MAX_REDIRECTS times yet; False when it is not (the reply is the vote)."""
        redirects = self.redirects
        if redirects is None:
            redirects = self.redirects = {}
        if redirects.get(key, 0) >= MAX_REDIRECTS:
            return False
        target = self.router.redirect(master.index, text)
        if target is None:
            return False
        link = self.masters[target[0]]
        if link.sock is None:
            link.warm = True  # (opened by the next round, for the redirects that follow)
            return False
        if link.state != READY or link.login_due or link.carries is None:
            return False
        redirects[key] = redirects.get(key, 0) + 1
        master.carries.remove(key)  # type: ignore[union-attr]
        link.carries.append(key)
        sha = self.sha
        if sha is not None and sha not in link.scripts:
            data = self.evals[key]  # type: ignore[index]
            link.scripts.add(sha)
        else:
            data = self.commands[key]
        if not link.busy:  # not in this round until now
            link.busy = link.waited = True
            link.fresh = False
            link.todo = 0
            link.deadline = self.deadline
        if target[1]:
            data = ASKING_COMMAND + data
            link.owed.append((ASKING, key))
        link.owed.append(key)
        link.todo += 1
        try:
            link.push(data)
        except Broken as exc:
            self.fail(link, CONN_ERROR, str(exc))
            return True
        self.watch(link)
        return True

    def _send(self, master: Master, data: bytes) -> bool:
        """Writes one more command in the middle of a round; False when the connection failed."""
        had_unsent = master.unsent is not None
        try:
            master.push(data)
        except Broken as exc:
            self.fail(master, CONN_ERROR, str(exc))
            return False
        if master.unsent is not None and not had_unsent:
            self.poller.register(master.fd, POLLIN | POLLOUT)
        return True

    def _abandon(self, master: Master, end: int) -> None:
        """The round ended with replies still owed: later rounds read them and drop them (a
        script's, if it says NOSCRIPT, gets its EVAL sent then, unless it acquires: see LOGIN
        and Script.acquires)."""
        if len(master.owed) > MAX_STALE_REPLIES:
            master.drop()
            return
        evals = self.evals
        if evals is not None and evals.acquires:
            evals = None  # a late acquire never runs (Script.acquires)
        item_evals = self.item_evals
        owed: deque[Any] = deque()
        for entry in master.owed:
            if type(entry) is int:
                if evals is None:
                    entry = None
                elif entry >= 0:
                    entry = evals[entry]
                else:  # (a batched round's name sent on its own)
                    entry = item_evals[-1 - entry]  # type: ignore[index]
            elif type(entry) is tuple:
                entry = None  # (an ASKING's reply)
            owed.append(entry)
        master.owed = owed
        master.todo = 0
        if end >= master.deadline:  # an early-decided round leaves the mark as it was
            self.lagged |= master.bit


def run_blocking(rnd: Round) -> list[RoundResult]:
    """The sync driver: polls what the round waits for until it is finished, ends it, and gives
    its results. An exception on the way (a KeyboardInterrupt, a signal handler's) breaks the
    round off."""
    try:
        # (no socket left in the round is finished() too; tested first, without a call)
        while rnd.active and not rnd.finished():
            now = time.monotonic_ns()
            remaining_ns = rnd.next_deadline_ns - now
            if remaining_ns > 0:
                for fd, event in rnd.poller.poll((remaining_ns + 999_999) // 1_000_000):
                    rnd.on_ready(fd, event & ~POLLOUT, event & POLLOUT)
            else:
                rnd.on_deadline(now)
        rnd.end()
    except BaseException:
        rnd.break_off()
        raise
    return rnd.votes.results(rnd.ended_ns)
