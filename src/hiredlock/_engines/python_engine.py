"""The pure-Python engine: the engine contract (see _engines/contract.py) on its own sockets and
RESP2.

One round: every command for every master is written before any reply is read (a connection
opened in the round gets its login, AUTH and SELECT, pipelined in front of them); then a driver
waits on all sockets at once, until the outcome is decided (or, for rounds that wait for all, every
master that keeps up has answered) or the round's deadline. Sockets are non-blocking and every
wait is for what is left of the round, so a round's time is bounded as a whole, however a master
sends its bytes. The round itself never waits (see _Round): the blocking driver is
run_blocking, below; the asyncio one is aio/_driver.py.

Every reply a connection owes is accounted for, in order (_Master.owed): the login's first, then
those owed to abandoned rounds (read and dropped by later rounds), then this round's. A master is
marked busy from the start of a round until its accounting at the end; one still marked when the
next round starts (or at close) was in a round that an exception ended (a KeyboardInterrupt, a
signal handler's exception): what it still owes is unknown, so its connection is dropped, never
read as if in step.
"""

from __future__ import annotations

import os
import select
import socket
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Optional

from .._core import fork as _fork
from .._core.config import MasterSpec
from .._core.places import SentinelGroup
from .._core.scripts import (
    CONNECT_TIMEOUT_MIN_MS,
    MAX_STALE_REPLIES,
    RECONNECT_BACKOFF_MAX_MS,
    RECONNECT_BACKOFF_MIN_MS,
    Outcome,
    quorum,
)
from . import resolver as _resolver
from .connect import (
    CONNECT_TIMED_OUT,
    LOCAL_ERRNOS,
    PLAINTEXT_RESET,
    TLS_HANDSHAKE_TIMED_OUT,
    direct_address,
    local_error,
    login_commands,
    place_of,
    start_connect,
)
from .contract import RoundResult
from .poller import POLLIN, POLLOUT, new_poller
from .resp import (
    NOT_READY,
    ProtocolError,
    Reader,
    ReplyError,
    ReplyTooLarge,
    pack_command,
    pack_set_nx_px,
)
from .tls import TLSChannel, TLSError

OK = int(Outcome.OK)
TAKEN = int(Outcome.TAKEN)
TIMEOUT = int(Outcome.TIMEOUT)
CONN_ERROR = int(Outcome.CONN_ERROR)
ERROR = int(Outcome.ERROR)
SKIPPED = int(Outcome.SKIPPED)
PENDING = 255

_KIND_SET = 0
_KIND_SCRIPT = 1

_DOWN = 0
_CONNECTING = 1
_READY = 2

# What each reply a connection owes answers (_Master.owed): an int k is item k of the current
# round; _LOGIN the reply to AUTH or SELECT; None a reply owed to an abandoned round, dropped when
# read; bytes too, but if that reply says NOSCRIPT those bytes (the script's EVAL) are sent then,
# so that a master that answered late still runs the release or extend it was sent.
_LOGIN = "login"

_SENTINEL_CHECK_NS = int(_resolver.SENTINEL_CHECK_S * 1e9)

# A TLS master's `unsent`: its channel keeps what the socket did not take yet.
_IN_CHANNEL = memoryview(b"")

_CONNECT_MIN_NS = int(CONNECT_TIMEOUT_MIN_MS * 1_000_000)
_MAX_DETAIL = 400  # characters of an error text kept in a vote (as the native engine)
_RECV_BYTES = 65536
# A connection the master closed shows as one of these in the idle check before a round.
_POLLRDHUP = getattr(select, "POLLRDHUP", 0)
_HUNG_UP = (
    _POLLRDHUP
    | getattr(select, "POLLHUP", 0)
    | getattr(select, "POLLERR", 0)
    | getattr(select, "POLLNVAL", 0)
)


def _os_error_text(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


class _Master:
    """One master's connection and what it still owes us."""

    __slots__ = (
        "address",
        "backoff_ms",
        "busy",
        "channel",
        "check_after",
        "connect_deadline",
        "deadline",
        "demoted",
        "down_until",
        "fd",
        "fresh",
        "heard",
        "index",
        "lagging",
        "last_error",
        "login",
        "login_due",
        "n_login",
        "owed",
        "place",
        "reader",
        "scripts",
        "sock",
        "spec",
        "state",
        "todo",
        "unqueued",
        "unreached",
        "unsent",
        "waited",
    )

    def __init__(self, index: int, spec: MasterSpec) -> None:
        self.index = index
        self.spec = spec
        # what _resolver looks up for this master's address (a host name, or a Sentinel
        # group), or None: a unix socket or a numeric address needs no lookup
        self.place: Any = place_of(spec)
        self.demoted = False  # answered READONLY in this round (a replica now)
        self.address: Any = None  # the looked-up address its connection went to
        self.check_after = 0  # (a Sentinel group's) when to compare it with the cache's again
        self.login, self.n_login = login_commands(spec)
        self.sock: Optional[socket.socket] = None
        # a TLS master's channel (see _engines/tls.py), made once the TCP connect is confirmed:
        # every byte of the connection goes through it
        self.channel: Optional[TLSChannel] = None
        self.fd = -1
        self.state = _DOWN
        self.reader = Reader()
        self.owed: deque = deque()
        self.login_due = False
        # SHAs of the scripts sent on this connection as EVAL: the master has them cached before
        # any later command of the connection runs, so EVALSHA is safe for those (a NOSCRIPT, after
        # a SCRIPT FLUSH, is answered with the EVAL, in its round or late). Until then a script
        # goes as EVAL, the only form that cannot be refused. A master that stopped reading is
        # then sent the source once, not with every command queued for it.
        self.scripts: set[bytes] = set()
        # Bytes the socket has not taken yet (written as it becomes writable): a stopped master
        # with full buffers must not hold up the others.
        self.unsent: Optional[memoryview] = None
        self.busy = False  # in a round whose accounting has not run yet (see the module doc)
        self.todo = 0  # replies of the current round still owed
        self.fresh = False  # its connection opened or came up in (or just before) this round
        self.unqueued = False  # no round's commands queued on its connection yet
        self.heard = False  # some reply came on its connection
        self.deadline = 0  # when the current round stops waiting for it
        self.connect_deadline = 0  # a connect still pending then has failed (see _Round.end)
        self.waited = True  # rounds that wait for all wait for it (it is not lagging)
        self.lagging = False  # a round timed out on it; cleared once it has caught up
        self.down_until = 0  # monotonic ns before which acquire does not reconnect
        self.backoff_ms = 0
        self.last_error = ""
        self.unreached = False  # its last failure came before anything was written to it

    def open(self, address: Any) -> None:
        """Starts a non-blocking connect (a unix socket path, or a resolved Address)."""
        self.address = address
        sock, connected = start_connect(self.spec, address)
        self.sock = sock
        self.fd = sock.fileno()
        self.channel = None
        # (a TLS connection is not ready before its handshake: _Round._connected runs it)
        self.state = _READY if connected and self.spec.tls is None else _CONNECTING
        self.reader = Reader()
        self.owed = deque()
        self.scripts = set()
        self.unsent = None
        self.lagging = False
        self.heard = False
        self.login_due = self.n_login > 0
        self.unqueued = True

    def push(self, data: bytes) -> Optional[str]:
        """Writes what the socket takes now; the rest waits in `unsent`. An error text, or None."""
        if self.channel is not None:
            try:
                if not self.channel.write(data):
                    self.unsent = _IN_CHANNEL
            except TLSError as exc:
                return str(exc)
            return None
        if self.unsent is not None:
            self.unsent = memoryview(bytes(self.unsent) + data)
            return None
        try:
            sent = self.sock.send(data)  # type: ignore[union-attr]
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            return self.broken(exc)
        if sent < len(data):
            self.unsent = memoryview(data)[sent:]
        return None

    def broken(self, exc: OSError) -> str:
        """Why a plaintext connection failed to read or write (see _connect.PLAINTEXT_RESET)."""
        if (
            isinstance(exc, (ConnectionResetError, BrokenPipeError))
            and not self.heard
            and self.spec.tls is None
            and self.spec.path is None
        ):
            return PLAINTEXT_RESET
        return _os_error_text(exc)

    def failed(self, now_ns: int, reason: str, unreached: bool) -> None:
        """Drops the connection after an error and sets a growing pause before the next connect.

        unreached: the failure came before anything was written to the master (name lookup,
        connect).
        """
        self.unreached = unreached
        self.drop()
        self.last_error = f"not retried yet after: {reason}"
        self.backoff_ms = min(
            RECONNECT_BACKOFF_MAX_MS, max(RECONNECT_BACKOFF_MIN_MS, self.backoff_ms * 2)
        )
        self.down_until = now_ns + self.backoff_ms * 1_000_000

    def drop(self) -> None:
        """Closes the connection. Only close(): no bytes are sent, which is what a forked child
        needs too (its parent's copy of the socket stays open and usable)."""
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()
        self.channel = None
        self.fd = -1
        self.state = _DOWN
        self.owed = deque()
        self.scripts = set()
        self.unsent = None
        self.lagging = False
        self.todo = 0


class _Votes:
    """Vote bookkeeping of one round: per key, per master, and when each key was decided."""

    __slots__ = (
        "codes",
        "decided_at",
        "details",
        "fails",
        "n",
        "oks",
        "q",
        "t0",
        "undecided",
        "values",
    )

    def __init__(self, n_keys: int, n: int, q: int, t0: int, want_values: bool) -> None:
        self.n = n
        self.q = q
        self.t0 = t0
        self.codes = [bytearray([PENDING]) * n for _ in range(n_keys)]
        self.oks = [0] * n_keys
        self.fails = [0] * n_keys
        self.decided_at = [0] * n_keys
        self.details: list[Optional[dict[int, str]]] = [None] * n_keys
        self.undecided = n_keys
        self.values = [[0] * n for _ in range(n_keys)] if want_values else None

    def vote(self, key: int, master: int, code: int, detail: Optional[str] = None) -> None:
        codes = self.codes[key]
        if codes[master] != PENDING:
            return
        codes[master] = code
        if detail is not None:
            self.explain(key, master, detail)
        if code == OK:
            self.oks[key] += 1
        else:
            self.fails[key] += 1
        if not self.decided_at[key] and (
            self.oks[key] >= self.q or self.fails[key] > self.n - self.q
        ):
            self.decided_at[key] = time.monotonic_ns()
            self.undecided -= 1

    def vote_all(self, master: int, code: int, detail: Optional[str]) -> None:
        for key in range(len(self.codes)):
            self.vote(key, master, code, detail)

    def explain(self, key: int, master: int, detail: str) -> None:
        if self.details[key] is None:
            self.details[key] = {}
        self.details[key][master] = detail[:_MAX_DETAIL]  # type: ignore[index]

    def count(self, key: int, master: int, kind: int, reply: Any) -> None:
        """Turns one reply into a vote (as the native engine does, reply type by reply type)."""
        if type(reply) is ReplyError:
            self.vote(key, master, ERROR, reply.text)
        elif kind == _KIND_SET:
            if reply == b"OK":
                self.vote(key, master, OK)
            elif reply is None:
                self.vote(key, master, TAKEN)
            else:
                self.vote(key, master, ERROR, "unexpected reply to SET")
        elif type(reply) is int:
            if self.values is not None:
                self.values[key][master] = reply
            self.vote(key, master, OK if reply > 0 else TAKEN)
        elif reply is None:
            self.vote(key, master, TAKEN)
        else:
            self.vote(key, master, ERROR, "unexpected reply to the script")

    def explain_pending(self, master: int, detail: str) -> None:
        """Gives the master's pending votes on undecided keys (they end as TIMEOUT) a reason."""
        for key, codes in enumerate(self.codes):
            if codes[master] == PENDING and not self.decided_at[key]:
                self.explain(key, master, detail)

    def results(self, end_ns: int) -> list[RoundResult]:
        """Masters still pending were SKIPPED if their key was decided, else they TIMED OUT."""
        out = []
        for key, (codes, decided, details) in enumerate(
            zip(self.codes, self.decided_at, self.details)
        ):
            if PENDING in codes:
                codes = codes.replace(b"\xff", bytes([SKIPPED if decided else TIMEOUT]))
            values = None if self.values is None else tuple(self.values[key])
            out.append((bytes(codes), (decided or end_ns) - self.t0, details, values))
        return out


class _Evals:
    """Each item's script as EVAL (with its source), formatted when first needed: on a connection
    that has not run the script yet, after NOSCRIPT, or for a reply the round leaves owed."""

    __slots__ = ("argvs", "batch", "count", "packed", "source")

    def __init__(self, source: bytes, count: bytes, argvs: Sequence[tuple[bytes, ...]]) -> None:
        self.source = source
        self.count = count
        self.argvs = argvs
        self.packed: list[Optional[bytes]] = [None] * len(argvs)
        self.batch: Optional[bytes] = None

    def __getitem__(self, item: int) -> bytes:
        packed = self.packed[item]
        if packed is None:
            packed = self.packed[item] = pack_command(
                (b"EVAL", self.source, self.count, *self.argvs[item])
            )
        return packed

    def all(self) -> bytes:
        if self.batch is None:
            self.batch = b"".join(self[item] for item in range(len(self.packed)))
        return self.batch


class _Round:
    """One call: its commands, its votes, and the masters it is still doing I/O with.

    A round never waits: a driver waits for it and feeds it what happened, so one round serves
    the blocking driver (run_blocking, below) and the asyncio one (aio/_driver.py) alike:

        fds_wanted()              fd -> POLLIN | POLLOUT: what the round waits for on each socket
        on_ready(fd, r, w)        that socket is readable (r) and/or writable (w)
        next_deadline_ns          when (time.monotonic_ns) on_deadline is due
        on_deadline(now_ns)       a deadline passed: a last look without waiting, then the round
                                  either ends or goes on to the connect bound of new connections
        finished()                nothing more to wait for: the driver then calls end()
        end()                     the accounting (once): what each master still owes is kept for
                                  later rounds to read and drop, or its connection goes; also how
                                  a driver gives up on a round early (a cancelled task); the
                                  engine's finish(round) then gives the results
        break_off()               instead of end() after an exception in the middle of an event:
                                  what the masters owe is unknown, so their connections go
        poller                    a poll object registered with exactly fds_wanted(), for a
                                  driver that polls
        before_close              None, or called with an fd just before the round closes that
                                  socket, so a driver can unregister it from its own event loop
                                  first (fd numbers are reused)
    """

    __slots__ = (
        "active",
        "batch",
        "before_close",
        "best_effort",
        "commands",
        "deadline",
        "ended_ns",
        "evals",
        "fresh_deadline",
        "kind",
        "masters",
        "next_deadline_ns",
        "over",
        "past_deadline",
        "poller",
        "sha",
        "votes",
        "wait_all",
    )

    def __init__(
        self,
        masters: Sequence[_Master],
        kind: int,
        commands: list[bytes],
        evals: Optional[_Evals],
        sha: Optional[bytes],
        votes: _Votes,
        deadline: int,
        fresh_deadline: int,
        wait_all: bool,
        best_effort: bool,
    ) -> None:
        self.masters = masters
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
        # The unlock after a failed attempt: nobody waits on its outcome, so it waits for the
        # masters keeping up only, decided or not (see _engines/contract.py).
        self.best_effort = best_effort
        self.poller = new_poller()
        self.before_close: Optional[Callable[[int], None]] = None
        # fd -> master, for masters this round still does I/O with: connecting, writing, or owed
        # replies of this round
        self.active: dict[int, _Master] = {}

    # -- what a driver calls ---------------------------------------------------------------------

    def fds_wanted(self) -> dict[int, int]:
        return {fd: _events_wanted(master) for fd, master in self.active.items()}

    def finished(self) -> bool:
        """Whether the round is over (the stop rules of _engines/contract.py), as the native
        engine's _stop: past the deadline only masters whose connection opened in the round are
        waited for; a master waited for owes the round its connect or replies (bytes it has still to
        take do not count)."""
        if self.over:
            return True
        past = self.past_deadline
        owed = owed_waited = False
        for master in self.active.values():
            if (past and not master.fresh) or not (master.todo or master.state == _CONNECTING):
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
        """Past the deadline: whether the masters connected in this round, still unanswered,
        could yet make an undecided key succeed (the others' silence counts as failure by now)."""
        votes = self.votes
        fresh = [master.index for master in self.active.values() if master.fresh]
        for codes, decided, oks in zip(votes.codes, votes.decided_at, votes.oks):
            if not decided and oks + sum(codes[i] == PENDING for i in fresh) >= votes.q:
                return True
        return False

    def on_ready(self, fd: int, readable: Any, writable: Any) -> None:
        master = self.active.get(fd)
        if master is None:
            return
        if master.state == _CONNECTING:
            self._connected(master)
            return
        if writable and master.unsent is not None and not self._flush(master):
            return
        if readable and not self._read(master):
            return
        if not master.todo and master.unsent is None:
            self.retire(master)

    def on_deadline(self, now_ns: int) -> None:
        if self.over or now_ns < self.next_deadline_ns:
            return
        # Past the deadline, take one more look without waiting: replies that are already here
        # count (a client descheduled past its deadline must not call masters that answered in
        # time dead).
        for fd, event in self.poller.poll(0):
            self.on_ready(fd, event & ~POLLOUT, event & POLLOUT)
        if self.past_deadline or self.fresh_deadline <= self.deadline or self.best_effort:
            self.over = True
        else:
            self.past_deadline = True
            self.next_deadline_ns = self.fresh_deadline

    def end(self) -> None:
        """Accounts the round, once; clears each master's busy mark, last (see the module doc)."""
        if self.ended_ns:
            return
        end = self.ended_ns = time.monotonic_ns()
        for master in self.masters:
            if master.demoted:
                # It answered READONLY: a replica since a failover. Its connection goes, and
                # where the master is now is asked again.
                master.demoted = False
                if master.sock is not None:
                    if self.before_close is not None:
                        self.before_close(master.fd)
                    master.drop()
                _resolver.refresh(master.place)
            if master.sock is not None:
                if master.state == _CONNECTING:
                    # Nothing was queued on it. Kept for later rounds until the connect bound of
                    # the round that opened it; past that, it failed.
                    if end >= master.connect_deadline:
                        # (a TLS master has its channel once the TCP connect is confirmed)
                        why = (
                            CONNECT_TIMED_OUT if master.channel is None else TLS_HANDSHAKE_TIMED_OUT
                        )
                        self.votes.explain_pending(master.index, why)
                        master.failed(end, why, unreached=True)
                elif master.todo:
                    # (bytes not written yet stay queued: later rounds write them behind)
                    self._abandon(master, end)
            master.busy = False

    def break_off(self) -> None:
        """Instead of end() after an exception: the connections of masters not accounted yet go
        (what they owe is unknown)."""
        for master in self.masters:
            if master.busy:
                master.drop()
                master.busy = False

    # -- bookkeeping -----------------------------------------------------------------------------

    def watch(self, master: _Master) -> None:
        # _events_wanted, written out: this runs for every master of every round
        if master.state == _CONNECTING:
            events = POLLOUT if master.channel is None else _handshake_events(master.channel)
        else:
            events = POLLIN if master.unsent is None else POLLIN | POLLOUT
        self.poller.register(master.fd, events)
        self.active[master.fd] = master

    def retire(self, master: _Master) -> None:
        if self.active.pop(master.fd, None) is not None:
            self.poller.unregister(master.fd)

    def fail(self, master: _Master, code: int, detail: str, unreached: bool = False) -> None:
        """The master failed in this round: each key it has not answered gets this vote."""
        self.votes.vote_all(master.index, code, detail)
        self.retire(master)
        if self.before_close is not None and master.sock is not None:
            self.before_close(master.fd)
        master.failed(time.monotonic_ns(), detail, unreached)
        if master.place is not None:  # its address may have moved: a failover, a DNS change
            _resolver.refresh(master.place)

    # -- I/O -------------------------------------------------------------------------------------

    def queue(self, master: _Master) -> None:
        """Writes the round's commands (after the login on a new connection) to a master."""
        master.unqueued = False
        if self.evals is not None and self.sha not in master.scripts:
            data = self.evals.all()  # not sent on this connection yet: EVAL (see _Master.scripts)
            master.scripts.add(self.sha)
        else:
            data = self.batch
        owed = master.owed
        if master.login_due:
            master.login_due = False
            data = master.login + data
            owed.extend([_LOGIN] * master.n_login)
        n_items = len(self.commands)
        if n_items == 1:
            owed.append(0)
        else:
            owed.extend(range(n_items))
        master.todo = n_items
        error = master.push(data)
        if error is not None:
            self.fail(master, CONN_ERROR, error)
            return
        self.watch(master)

    def _connected(self, master: _Master) -> None:
        """Finishes a non-blocking connect (and a TLS master's handshake, step by step); then the
        login and the round's commands go."""
        tls = master.spec.tls
        if master.channel is None:
            error = master.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)  # type: ignore[union-attr]
            if error:
                self.fail(master, CONN_ERROR, os.strerror(error), unreached=True)
                return
            if tls is not None:
                try:
                    # (a Sentinel group's master is known by the address the sentinels gave)
                    host = master.spec.host or master.address.host
                    master.channel = TLSChannel(tls, master.sock, host)
                except TLSError as exc:
                    self.fail(master, CONN_ERROR, str(exc), unreached=True)
                    return
        if master.channel is not None and master.state == _CONNECTING:
            try:
                done = master.channel.handshake()
            except TLSError as exc:
                self.fail(master, CONN_ERROR, str(exc), unreached=True)
                return
            if not done:
                self.watch(master)  # (what the handshake waits for now)
                return
            if master.channel.wants_write:
                master.unsent = _IN_CHANNEL
        master.state = _READY
        master.backoff_ms = 0
        # connected in this round (opened in an earlier one, maybe): its login and first
        # commands have the connect bound
        master.fresh = master.waited = True
        master.deadline = self.fresh_deadline
        self.retire(master)
        self.queue(master)

    def _flush(self, master: _Master) -> bool:
        """Writes more of what the socket did not take; False when the connection failed."""
        if master.channel is not None:
            try:
                done = master.channel.flush()
            except TLSError as exc:
                self.fail(master, CONN_ERROR, str(exc))
                return False
            if done:
                master.unsent = None
                self.poller.register(master.fd, POLLIN)
            return True
        unsent = master.unsent
        try:
            sent = master.sock.send(unsent)  # type: ignore[union-attr,arg-type]
        except BlockingIOError:
            return True
        except OSError as exc:
            self.fail(master, CONN_ERROR, master.broken(exc))
            return False
        if sent < len(unsent):  # type: ignore[arg-type]
            master.unsent = unsent[sent:]  # type: ignore[index]
        else:
            master.unsent = None
            self.poller.register(master.fd, POLLIN)
        return True

    def _read(self, master: _Master) -> bool:
        """Reads what arrived and counts every whole reply; False when the connection failed."""
        if master.channel is not None:
            try:
                data = master.channel.read()
            except TLSError as exc:
                self.fail(master, CONN_ERROR, str(exc))
                return False
            if not data:
                return True  # TLS records only, so far
        else:
            try:
                data = master.sock.recv(_RECV_BYTES)  # type: ignore[union-attr]
            except BlockingIOError:
                return True
            except OSError as exc:
                self.fail(master, CONN_ERROR, master.broken(exc))
                return False
            if not data:
                self.fail(master, CONN_ERROR, "connection closed by the master")
                return False
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
                master.lagging = False  # every earlier reply came first: it has caught up
                if self.sha is not None:
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
                if (
                    type(reply) is ReplyError
                    and master.place is not None
                    and reply.text.startswith("READONLY")
                ):
                    master.demoted = True  # a replica now: see end()
                votes.count(entry, master.index, self.kind, reply)
            elif entry is _LOGIN:
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

    def _send(self, master: _Master, data: bytes) -> bool:
        """Writes one more command in the middle of a round; False when the connection failed."""
        had_unsent = master.unsent is not None
        error = master.push(data)
        if error is not None:
            self.fail(master, CONN_ERROR, error)
            return False
        if master.unsent is not None and not had_unsent:
            self.poller.register(master.fd, POLLIN | POLLOUT)
        return True

    def _abandon(self, master: _Master, end: int) -> None:
        """The round ended with replies still owed: later rounds read them and drop them (a
        script's, if it says NOSCRIPT, gets its EVAL sent then: see _LOGIN)."""
        if len(master.owed) > MAX_STALE_REPLIES:
            master.drop()
            return
        evals = self.evals
        master.owed = deque(
            (None if evals is None else evals[entry]) if type(entry) is int else entry
            for entry in master.owed
        )
        master.todo = 0
        if end >= master.deadline:  # an early-decided round leaves the flag as it was
            master.lagging = True


def _events_wanted(master: _Master) -> int:
    """What a round waits for on a master's socket: the end of its connect, or replies (and room
    for what is left to write)."""
    if master.state == _CONNECTING:
        return POLLOUT if master.channel is None else _handshake_events(master.channel)
    return POLLIN if master.unsent is None else POLLIN | POLLOUT


def _handshake_events(channel: TLSChannel) -> int:
    """What a TLS handshake in progress waits for: the server's records (and room to send)."""
    return POLLIN | POLLOUT if channel.wants_write else POLLIN


def run_blocking(rnd: _Round) -> list[RoundResult]:
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


class PythonEngine:
    """Engine contract on plain non-blocking sockets, one connection per master.

    A round runs in one call (set_nx, run_script), or in steps for a driver of one's own:
    begin_set_nx / begin_script start it (commands written, connections opening), the driver
    feeds it events (see _Round), finish(round) gives the results.
    """

    name = "python"

    def __init__(self, masters: Sequence[MasterSpec], quorum_size: Optional[int] = None) -> None:
        self._masters = [_Master(index, spec) for index, spec in enumerate(masters)]
        self._quorum = quorum_size if quorum_size is not None else quorum(len(self._masters))
        self._generation = _fork.generation
        _resolver.prefetch([master.place for master in self._masters if master.place is not None])

    def set_nx(
        self,
        keys: Sequence[bytes],
        tokens: Sequence[bytes],
        ttl_ms: int,
        timeout_ms: float,
    ) -> list[RoundResult]:
        return run_blocking(self.begin_set_nx(keys, tokens, ttl_ms, timeout_ms))

    def run_script(
        self,
        sha: bytes,
        source: bytes,
        numkeys: int,
        argvs: Sequence[tuple[bytes, ...]],
        timeout_ms: float,
        wait_all: bool,
        want_values: bool = False,
        honour_backoff: bool = False,
    ) -> list[RoundResult]:
        return run_blocking(
            self.begin_script(
                sha, source, numkeys, argvs, timeout_ms, wait_all, want_values, honour_backoff
            )
        )

    def begin_set_nx(
        self,
        keys: Sequence[bytes],
        tokens: Sequence[bytes],
        ttl_ms: int,
        timeout_ms: float,
    ) -> _Round:
        """Starts set_nx's round; a driver waits for it, finish() gives its results."""
        if len(keys) != len(tokens):
            raise ValueError("set_nx needs one token per key")
        ttl = b"%d" % int(ttl_ms)
        commands = [pack_set_nx_px(key, token, ttl) for key, token in zip(keys, tokens)]
        return self._begin(_KIND_SET, commands, None, None, timeout_ms, False, True, False)

    def begin_script(
        self,
        sha: bytes,
        source: bytes,
        numkeys: int,
        argvs: Sequence[tuple[bytes, ...]],
        timeout_ms: float,
        wait_all: bool,
        want_values: bool = False,
        honour_backoff: bool = False,
    ) -> _Round:
        """Starts run_script's round; a driver waits for it, finish() gives its results."""
        count = b"%d" % numkeys
        commands = [pack_command((b"EVALSHA", sha, count, *argv)) for argv in argvs]
        evals = _Evals(source, count, argvs)
        return self._begin(
            _KIND_SCRIPT, commands, evals, sha, timeout_ms, wait_all, honour_backoff, want_values
        )

    @staticmethod
    def finish(rnd: _Round) -> list[RoundResult]:
        """The results of a round a driver is done with (accounting it first if need be)."""
        rnd.end()
        return rnd.votes.results(rnd.ended_ns)

    def owes_replies(self) -> bool:
        """True when a master still owes replies to a round that ended, or has bytes of one not
        written yet: commands of that round may still run there, after this moment."""
        for master in self._masters:  # noqa: SIM110 (a loop: any() and a generator cost more here)
            if master.owed or master.unsent is not None:
                return True
        return False

    def close(self) -> None:
        """Closes every connection (in a forked child too: closing sends nothing, see drop)."""
        for master in self._masters:
            master.drop()
            master.busy = False

    # -- one round ---------------------------------------------------------------------------

    def _begin(
        self,
        kind: int,
        commands: list[bytes],
        evals: Optional[_Evals],
        sha: Optional[bytes],
        timeout_ms: float,
        wait_all: bool,
        honour_backoff: bool,
        want_values: bool,
    ) -> _Round:
        if not commands:  # nothing to do: a round with no masters, finished already
            now = time.monotonic_ns()
            votes = _Votes(0, len(self._masters), self._quorum, now, want_values)
            return _Round((), kind, commands, evals, sha, votes, now, now, False, False)
        if self._generation != _fork.generation:  # (an attribute read: cheaper than a call)
            self.close()  # the parent's sockets: closed here, never used
            self._generation = _fork.generation
        masters = self._masters
        for master in masters:
            if master.busy:
                master.drop()  # an exception ended its last round before the accounting
            master.busy = True
        t0 = time.monotonic_ns()
        timeout_ns = int(timeout_ms * 1_000_000)
        votes = _Votes(len(commands), len(masters), self._quorum, t0, want_values)
        rnd = _Round(
            masters,
            kind,
            commands,
            evals,
            sha,
            votes,
            t0 + timeout_ns,
            t0 + max(timeout_ns, _CONNECT_MIN_NS),
            wait_all,
            wait_all and honour_backoff,
        )
        try:
            self._refresh()
            self._start(rnd, t0, honour_backoff)
        except BaseException:
            rnd.break_off()
            raise
        return rnd

    def _refresh(self) -> None:
        """Reads, without waiting, what idle connections received since the last round.

        Late replies to earlier rounds are dealt with here, so a master that was merely slower
        than the quorum is waited for again; a connection the master closed meanwhile (a restart)
        is replaced in this round instead of failing it.
        """
        idle = {master.fd: master for master in self._masters if master.sock is not None}
        if not idle:
            return
        poller = new_poller()
        for fd, master in idle.items():
            if master.state == _CONNECTING:
                poller.register(fd, _events_wanted(master))
            else:
                poller.register(fd, POLLIN | _POLLRDHUP)
        for fd, events in poller.poll(0):
            master = idle[fd]
            if master.state == _CONNECTING:
                # A connect that went on after its round: confirmed now (a TLS master's
                # handshake a step further; the login goes with this round's commands), or, if
                # the master went away meanwhile, started afresh in this round.
                if events & _HUNG_UP or not self._step_connect(master):
                    master.drop()
            elif not self._catch_up(master) or events & _HUNG_UP:
                master.drop()
            else:
                master.lagging = master.lagging and bool(master.owed)

    @staticmethod
    def _step_connect(master: _Master) -> bool:
        """Between rounds, what _Round._connected does in one: confirms a connect, or takes a TLS
        handshake a step further; False when the connection cannot be used (why does not matter
        here: the round that follows connects afresh and tells)."""
        if master.channel is None:
            if master.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR):  # type: ignore[union-attr]
                return False
            if master.spec.tls is not None:
                try:
                    host = master.spec.host or master.address.host
                    master.channel = TLSChannel(master.spec.tls, master.sock, host)
                except TLSError:
                    return False
        if master.channel is not None:
            try:
                if not master.channel.handshake():
                    return True  # goes on (in the round, or before the next one)
            except TLSError:
                return False
            if master.channel.wants_write:
                master.unsent = _IN_CHANNEL
        master.state = _READY
        master.backoff_ms = 0
        return True

    @staticmethod
    def _catch_up(master: _Master) -> bool:
        """Reads the replies an idle connection received; False when it cannot be used."""
        reader = master.reader
        owed = master.owed
        channel = master.channel
        while True:
            if channel is not None:
                try:
                    data = channel.read()
                except TLSError:
                    return False
                if not data:
                    return True
            else:
                try:
                    data = master.sock.recv(_RECV_BYTES)  # type: ignore[union-attr]
                except BlockingIOError:
                    return True
                except OSError:
                    return False
                if not data:
                    return False  # closed by the master
            reader.feed(data)
            while True:
                try:
                    reply = reader.get()
                except ProtocolError:
                    return False
                if reply is NOT_READY:
                    break
                master.heard = True
                if not owed:
                    return False  # a reply nobody asked for: never guess what it answers
                entry = owed.popleft()
                if entry is _LOGIN:
                    if type(reply) is ReplyError:
                        return False  # the next connect reports it
                elif (
                    entry is not None
                    and type(reply) is ReplyError
                    and reply.text.startswith("NOSCRIPT")
                ):
                    if master.push(entry) is not None:
                        return False
                    owed.append(None)

    def _start(self, rnd: _Round, t0: int, honour_backoff: bool) -> None:
        """Writes the round's commands to every connected master, then opens the connections
        that are missing."""
        self._follow_sentinels(t0)
        to_open = []
        for master in self._masters:
            master.fresh = False
            master.waited = not master.lagging
            master.todo = 0
            if master.sock is not None:
                master.deadline = rnd.deadline
                if master.state != _CONNECTING:
                    if master.unqueued:
                        # connected since the last round: its login and first commands go now,
                        # with the connect bound
                        master.fresh = True
                        master.deadline = rnd.fresh_deadline
                    rnd.queue(master)
                elif t0 < master.connect_deadline:
                    # still connecting since an earlier round: its commands go once it is up,
                    # and once the outcome is decided it is not waited for
                    master.waited = False
                    rnd.watch(master)
                else:
                    # (a TLS master has its channel once the TCP connect is confirmed)
                    why = CONNECT_TIMED_OUT if master.channel is None else TLS_HANDSHAKE_TIMED_OUT
                    rnd.fail(master, CONN_ERROR, why, unreached=True)
            elif (
                honour_backoff
                and t0 < master.down_until
                and (rnd.kind == _KIND_SET or master.unreached)
            ):
                # An acquire does not wait for a master that just failed, nor does the unlock
                # after a failed attempt when nothing could have reached that master; release
                # and extend always try.
                rnd.votes.vote_all(master.index, CONN_ERROR, master.last_error)
            else:
                to_open.append(master)
        if not to_open:
            return
        # Unix sockets and numeric addresses connect at once; host names wait (once per name,
        # at most what is left of the round) for the resolver's first answer, in one call.
        named = []
        for master in to_open:
            spec = master.spec
            if spec.path is not None:
                self._open(master, rnd, None)
            elif master.place is not None:
                named.append(master)
            else:
                self._open(master, rnd, direct_address(spec))
        if named:
            wait_s = max(0, rnd.deadline - time.monotonic_ns()) / 1e9
            places = [master.place for master in named]
            for master, address in zip(named, _resolver.lookup_many(places, wait_s)):
                if isinstance(address, str):  # no address: the resolver says why
                    rnd.fail(master, CONN_ERROR, address, unreached=True)
                else:
                    self._open(master, rnd, address)

    def _follow_sentinels(self, now: int) -> None:
        """Drops the connection of a Sentinel group's master when the sentinels name another one
        now (a failover): this round connects to the new one. Also when the cache names none any
        more (the sentinels have not answered for the stale lifetime of their last answer): this
        round's vote is why. A cache read (at most every SENTINEL_CHECK_S): _resolver asks the
        sentinels in the background."""
        due = [
            master
            for master in self._masters
            if master.sock is not None
            and isinstance(master.place, SentinelGroup)
            and now >= master.check_after
        ]
        if not due:
            return
        answers = _resolver.lookup_many([master.place for master in due], 0.0)
        for master, answer in zip(due, answers):
            master.check_after = now + _SENTINEL_CHECK_NS
            if isinstance(answer, str) or answer != master.address:
                master.drop()

    def _open(self, master: _Master, rnd: _Round, address: Any) -> None:
        """Starts a master's new connection; its login and the commands go once it is up."""
        try:
            master.open(address)
        except OSError as exc:
            if exc.errno in LOCAL_ERRNOS:
                # this process's failure (out of descriptors...): no backoff (see
                # _engines/connect.py)
                rnd.votes.vote_all(master.index, CONN_ERROR, local_error(_os_error_text(exc)))
                return
            rnd.fail(master, CONN_ERROR, _os_error_text(exc), unreached=True)
            return
        master.fresh = True
        master.waited = True
        master.deadline = master.connect_deadline = rnd.fresh_deadline
        if master.state == _READY:
            rnd.queue(master)
        else:
            rnd.watch(master)
