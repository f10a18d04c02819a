"""The pure-Python engine: the engine contract (see _contract.py) on redis-py connections.

Every command of a round is written to every master before any reply is read; replies are then read
from whichever socket is ready, until the outcome is decided or the round's deadline passes.
redis-py's own retries are off and every blocking call is bounded by the round's deadline.
"""

from __future__ import annotations

import contextlib
import errno
import inspect
import os
import socket
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, Optional

import redis
from redis.backoff import NoBackoff
from redis.connection import AbstractConnection, Connection, UnixDomainSocketConnection
from redis.exceptions import AuthenticationError, BusyLoadingError, NoScriptError, ResponseError
from redis.retry import Retry

from . import _fork
from ._config import MasterSpec
from ._contract import RoundResult
from ._poller import POLLIN, POLLOUT, new_poller
from ._scripts import (
    MAX_STALE_REPLIES,
    RECONNECT_BACKOFF_MAX_MS,
    RECONNECT_BACKOFF_MIN_MS,
    Outcome,
    quorum,
)

OK = int(Outcome.OK)
TAKEN = int(Outcome.TAKEN)
TIMEOUT = int(Outcome.TIMEOUT)
CONN_ERROR = int(Outcome.CONN_ERROR)
ERROR = int(Outcome.ERROR)
SKIPPED = int(Outcome.SKIPPED)
PENDING = 255
# A reply owed to an earlier, abandoned round is read and dropped; if it was a script's and says
# NOSCRIPT, its EVAL is sent then (the stale entry holds that command, else None), so a master
# that answered late still runs the release or extend it was sent.
# Error replies. redis-py makes NOAUTH/WRONGPASS and LOADING ConnectionErrors, but they are answers
# on a sound connection: a failed vote with the server's text, as in the native engine.
_REPLY_ERRORS = (ResponseError, AuthenticationError, BusyLoadingError)

_KIND_SET = 0
_KIND_SCRIPT = 1

# redis-py strips the error code from replies it knows; put it back so both engines say the same.
_ERROR_CODES: dict[type, str] = {}
try:
    from redis._parsers.base import BaseParser

    for _code, _cls in BaseParser.EXCEPTION_CLASSES.items():
        if isinstance(_cls, type):
            _ERROR_CODES.setdefault(_cls, _code)
except ImportError:  # older redis-py layouts: the message then keeps whatever redis-py left
    pass


def _error_text(exc: BaseException) -> str:
    text = str(exc)
    code = _ERROR_CODES.get(type(exc))
    if isinstance(exc, AuthenticationError):
        code = "NOAUTH" if "required" in text.lower() else "WRONGPASS"
    if code is None and type(exc) is ResponseError:
        # Codes redis-py does not know stay in the text; it strips a generic "ERR", whose
        # messages start with a word that is not all capitals.
        first = text.split(" ", 1)[0]
        if not (first.isalpha() and first.isupper()):
            code = "ERR"
    if code and not text.startswith(code):
        return f"{code} {text}"
    return text


# No CLIENT SETINFO round trips on connect: redis-py 8 takes driver_info, older ones lib_name.
if "driver_info" in inspect.signature(AbstractConnection.__init__).parameters:
    _NO_CLIENT_INFO: dict[str, Any] = {"driver_info": None}
else:
    _NO_CLIENT_INFO = {"lib_name": None, "lib_version": None}


class _PreparedSocketMixin:
    """Lets redis-py adopt a socket that our own non-blocking connect opened (no second connect)."""

    prepared_socket: Optional[socket.socket] = None

    def _connect(self) -> socket.socket:
        sock, self.prepared_socket = self.prepared_socket, None
        if sock is None:
            return super()._connect()  # type: ignore[misc]
        sock.settimeout(self.socket_timeout)  # type: ignore[attr-defined]
        return sock


class _TcpConnection(_PreparedSocketMixin, Connection):
    pass


class _UnixConnection(_PreparedSocketMixin, UnixDomainSocketConnection):
    pass


class _Master:
    """One master's connection and what it still owes us."""

    __slots__ = (
        "backoff_ms",
        "conn",
        "down_until",
        "index",
        "lagging",
        "last_error",
        "scripts",
        "spec",
        "stale",
        "unreached",
        "unsent",
        "waited",
    )

    def __init__(self, index: int, spec: MasterSpec) -> None:
        self.index = index
        self.spec = spec
        self.conn: Optional[Connection] = None
        self.stale: deque = deque()  # entries for replies owed to abandoned rounds (see above)
        self.down_until = 0  # monotonic ns before which acquire does not reconnect
        self.backoff_ms = 0
        self.last_error = ""
        self.waited = True
        self.lagging = False  # a round timed out on it; cleared once it has caught up
        self.unreached = False  # its last failure came before anything was written to it
        # SHAs of the scripts that have run on this connection: EVALSHA is safe for those. Until
        # a script has run, it goes as EVAL: an EVALSHA whose NOSCRIPT reply is lost or comes
        # after its round would never be followed by its EVAL (a release that silently does
        # nothing).
        self.scripts: set[bytes] = set()
        # The tail of this round's commands that the socket has not taken yet (written as it
        # becomes writable): a stopped master with full buffers must not hold up the others.
        self.unsent: Optional[memoryview] = None

    @property
    def connected(self) -> bool:
        return self.conn is not None and self.conn._sock is not None

    def start_connect(self) -> socket.socket:
        """Starts a non-blocking connect, so that every master connects at once."""
        if self.spec.path is not None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            address: Any = self.spec.path
        else:
            family, kind, proto, _name, address = socket.getaddrinfo(
                self.spec.host, self.spec.port, type=socket.SOCK_STREAM
            )[0]
            sock = socket.socket(family, kind, proto)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        error = sock.connect_ex(address)
        if error not in (0, errno.EINPROGRESS, errno.EAGAIN):
            sock.close()
            raise ConnectionRefusedError(error, os.strerror(error))
        return sock

    def adopt(self, sock: socket.socket, timeout_s: float) -> None:
        """Hands a connected socket to redis-py, which logs in (AUTH, SELECT) within timeout_s."""
        if self.conn is None:
            options: dict[str, Any] = {
                "db": self.spec.db,
                "username": self.spec.username,
                "password": self.spec.password,
                "retry": Retry(NoBackoff(), 0),
                "protocol": 2,  # RESP2 and no HELLO round trip on connect
                **_NO_CLIENT_INFO,
            }
            if self.spec.path is not None:
                self.conn = _UnixConnection(path=self.spec.path, **options)
            else:
                self.conn = _TcpConnection(host=self.spec.host, port=self.spec.port, **options)
        self.conn.socket_timeout = timeout_s
        self.conn.prepared_socket = sock
        self.conn.connect()
        self.backoff_ms = 0
        self.stale = deque()
        self.scripts = set()

    def failed(self, now_ns: int, reason: str, unreached: bool) -> None:
        """Drops the connection after an error and sets a growing pause before the next connect.

        unreached: the failure came before anything was written to the master (connect, login).
        """
        self.unreached = unreached
        self.drop()
        self.last_error = f"not retried yet after: {reason}"
        self.backoff_ms = min(
            RECONNECT_BACKOFF_MAX_MS, max(RECONNECT_BACKOFF_MIN_MS, self.backoff_ms * 2)
        )
        self.down_until = now_ns + self.backoff_ms * 1_000_000

    def drop(self) -> None:
        if self.conn is not None:
            self.conn.disconnect()
        self.stale = deque()
        self.lagging = False
        self.scripts = set()
        self.unsent = None

    def forget(self) -> None:
        """After fork(): lose the inherited socket without any I/O on it."""
        if self.conn is not None and self.conn._sock is not None:
            with contextlib.suppress(OSError):
                self.conn._sock.detach()  # the fd stays open for the parent's sake
            self.conn._sock = None
        self.conn = None
        self.stale = deque()
        self.scripts = set()
        self.unsent = None


class _Round:
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
            if self.details[key] is None:
                self.details[key] = {}
            self.details[key][master] = detail
        if code == OK:
            self.oks[key] += 1
        else:
            self.fails[key] += 1
        if not self.decided_at[key] and (
            self.oks[key] >= self.q or self.fails[key] > self.n - self.q
        ):
            self.decided_at[key] = time.monotonic_ns()
            self.undecided -= 1

    def count(self, key: int, master: int, kind: int, reply: Any) -> None:
        """Turns one reply into a vote (as the native engine does, reply type by reply type)."""
        if kind == _KIND_SET:
            if reply == b"OK":
                self.vote(key, master, OK)
            elif reply is None:
                self.vote(key, master, TAKEN)
            else:
                self.vote(key, master, ERROR, "unexpected reply to SET")
        elif isinstance(reply, int):
            if self.values is not None:
                self.values[key][master] = reply
            self.vote(key, master, OK if reply > 0 else TAKEN)
        elif reply is None:
            self.vote(key, master, TAKEN)
        else:
            self.vote(key, master, ERROR, "unexpected reply to the script")

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


class PythonEngine:
    """Engine contract on redis-py connections, one per master."""

    name = "python"

    def __init__(self, masters: Sequence[MasterSpec], quorum_size: Optional[int] = None) -> None:
        self._masters = [_Master(index, spec) for index, spec in enumerate(masters)]
        self._quorum = quorum_size if quorum_size is not None else quorum(len(self._masters))
        self._generation = _fork.generation()

    def set_nx(
        self,
        keys: Sequence[bytes],
        tokens: Sequence[bytes],
        ttl_ms: int,
        timeout_ms: float,
    ) -> list[RoundResult]:
        ttl = str(int(ttl_ms)).encode()
        commands = [(b"SET", key, token, b"NX", b"PX", ttl) for key, token in zip(keys, tokens)]
        return self._round(_KIND_SET, commands, None, None, timeout_ms, False, True, False)

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
        count = str(numkeys).encode()
        commands = [(b"EVALSHA", sha, count, *argv) for argv in argvs]
        fallback = [(b"EVAL", source, count, *argv) for argv in argvs]
        return self._round(
            _KIND_SCRIPT, commands, fallback, sha, timeout_ms, wait_all, honour_backoff, want_values
        )

    def close(self) -> None:
        forked = self._generation != _fork.generation()
        for master in self._masters:
            if forked:
                master.forget()
            else:
                master.drop()
            master.conn = None

    # -- one round ---------------------------------------------------------------------------

    def _round(
        self,
        kind: int,
        commands: list[tuple],
        fallback: Optional[list[tuple]],
        sha: Optional[bytes],
        timeout_ms: float,
        wait_all: bool,
        honour_backoff: bool,
        want_values: bool,
    ) -> list[RoundResult]:
        if self._generation != _fork.generation():
            for master in self._masters:
                master.forget()
            self._generation = _fork.generation()
        n_keys = len(commands)
        t0 = time.monotonic_ns()
        deadline = t0 + int(timeout_ms * 1_000_000)
        votes = _Round(n_keys, len(self._masters), self._quorum, t0, want_values)
        self._refresh()
        poller = new_poller()
        queues: dict[int, tuple[_Master, deque]] = {}  # fd -> (master, reply slots)
        connecting: dict[int, tuple[_Master, socket.socket]] = {}
        last_look = False
        for master in self._masters:
            if master.connected:
                self._send(master, commands, fallback, sha, votes, queues, poller)
            elif (
                honour_backoff
                and t0 < master.down_until
                and (kind == _KIND_SET or master.unreached)
            ):
                # An acquire does not wait for a master that just failed, nor does the unlock
                # after a failed attempt when nothing could have reached that master; release
                # and extend always try.
                self._vote_all(votes, master.index, CONN_ERROR, master.last_error)
            else:
                try:
                    sock = master.start_connect()
                except OSError as exc:
                    self._give_up(votes, master, exc, unreached=True)
                    continue
                connecting[sock.fileno()] = (master, sock)
                poller.register(sock, POLLOUT)
        while (queues or connecting) and (
            (connecting or self._waiting_for(queues)) if wait_all else votes.undecided
        ):
            remaining_ns = deadline - time.monotonic_ns()
            if remaining_ns <= 0:
                if last_look:
                    break
                # Past the deadline, take one more look without waiting: replies that are
                # already here count (a client descheduled past its deadline must not call
                # masters that answered in time dead).
                last_look = True
                remaining_ns = 0
            for fd, events in poller.poll(-(-remaining_ns // 1_000_000)):
                if fd in connecting:
                    master, sock = connecting.pop(fd)
                    poller.unregister(fd)
                    if self._connected(master, sock, votes, deadline):
                        self._send(master, commands, fallback, sha, votes, queues, poller)
                    continue
                master, slots = queues[fd]
                if master.unsent is not None and events & POLLOUT:
                    if not self._send_more(master, votes):
                        del queues[fd]
                        poller.unregister(fd)
                        continue
                    if master.unsent is None:
                        poller.register(fd, POLLIN)
                    if not events & ~POLLOUT:
                        continue
                if self._read(master, slots, kind, fallback, sha, votes, deadline) and slots:
                    continue
                del queues[fd]
                poller.unregister(fd)
            if last_look:
                break
        end = time.monotonic_ns()
        for master, sock in connecting.values():
            # Nothing was sent on it: closing loses nothing. Past the deadline it counts as failed.
            sock.close()
            if end >= deadline:
                self._give_up(votes, master, TimeoutError("connect timed out"), unreached=True)
        for master, slots in queues.values():
            if master.unsent is not None:
                # Part of a command is still unsent: what reached the master ran or will run
                # (later rounds reach it on a new connection); a half command dies with this one.
                master.drop()
                continue
            self._abandon(master, slots, fallback, end >= deadline)
        return votes.results(end)

    def _refresh(self) -> None:
        """Reads, without waiting, what idle connections received since the last round.

        Late replies to earlier rounds are dealt with here, so a master that was merely slower
        than the quorum is waited for again; a connection the master closed meanwhile (a restart)
        is replaced in this round instead of failing it.
        """
        idle = {m.conn._sock.fileno(): m for m in self._masters if m.connected}
        if not idle:
            return
        poller = new_poller()
        for fd in idle:
            poller.register(fd, POLLIN)
        for fd, _events in poller.poll(0):
            master = idle[fd]
            try:
                while master.stale and master.conn.can_read(timeout=0):
                    self._late_reply(master, master.stale)
                master.lagging = master.lagging and bool(master.stale)
                broken = master.conn.can_read(timeout=0)  # EOF, or a reply nobody asked for
            except (redis.RedisError, OSError):
                broken = True
            if broken:
                master.drop()

    @staticmethod
    def _late_reply(master: _Master, entries: deque) -> None:
        """Reads one reply owed to an abandoned round; a NOSCRIPT gets its EVAL sent now."""
        conn = master.conn
        try:
            conn.read_response(disable_decoding=True)
            entries.popleft()
        except NoScriptError:
            command = entries.popleft()
            if command is not None:
                conn.send_packed_command(conn.pack_command(*command), False)
                entries.append(None)
        except _REPLY_ERRORS:
            entries.popleft()

    def _connected(
        self, master: _Master, sock: socket.socket, votes: _Round, deadline: int
    ) -> bool:
        """Finishes a non-blocking connect and logs in; False (and votes) when that failed."""
        error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        try:
            if error:
                raise ConnectionRefusedError(error, os.strerror(error))
            master.adopt(sock, max(deadline - time.monotonic_ns(), 1_000_000) / 1e9)
        except (redis.RedisError, OSError) as exc:
            sock.close()
            self._give_up(votes, master, exc, unreached=True)
            return False
        return True

    def _send(
        self,
        master: _Master,
        commands: list[tuple],
        fallback: Optional[list[tuple]],
        sha: Optional[bytes],
        votes: _Round,
        queues: dict,
        poller: Any,
    ) -> None:
        conn = master.conn
        if fallback is not None and sha not in master.scripts:
            commands = fallback  # not run on this connection yet: EVAL (see _Master.scripts)
        master.unsent = memoryview(b"".join(conn.pack_commands(commands)))
        fd = conn._sock.fileno()
        if not self._send_more(master, votes):
            return
        # A master that let an earlier round time out and has not caught up since gets this
        # round's commands, but a wait_all round does not wait for it: one stopped master must not
        # cost every release its timeout. One merely slower than the quorum is waited for.
        master.waited = not master.lagging
        slots, master.stale = master.stale, deque()
        slots.extend(range(len(commands)))
        queues[fd] = (master, slots)
        poller.register(fd, POLLIN if master.unsent is None else POLLIN | POLLOUT)

    def _send_more(self, master: _Master, votes: _Round) -> bool:
        """Writes what the socket takes now of the round's unsent commands (without waiting: a
        full socket must not hold up the other masters); False if the connection failed."""
        sock = master.conn._sock
        unsent = master.unsent
        try:
            sock.setblocking(False)
            try:
                sent = sock.send(unsent)
            except BlockingIOError:
                sent = 0
        except OSError as exc:
            self._give_up(votes, master, exc)
            return False
        master.unsent = unsent[sent:] if sent < len(unsent) else None
        return True

    def _read(
        self,
        master: _Master,
        slots: deque,
        kind: int,
        fallback: Optional[list[tuple]],
        sha: Optional[bytes],
        votes: _Round,
        deadline: int,
    ) -> bool:
        """Reads every reply that is ready; False when the connection failed.

        `slots` says what each reply answers, in order: first entries owed to earlier rounds,
        then this round's item indices (an int).
        """
        conn = master.conn
        index = master.index
        try:
            while slots:
                remaining = (deadline - time.monotonic_ns()) / 1e9
                conn._sock.settimeout(max(remaining, 0.001))  # a half reply costs no more
                if not isinstance(slots[0], int):
                    self._late_reply(master, slots)
                else:
                    try:
                        reply: Any = conn.read_response(disable_decoding=True)
                    except _REPLY_ERRORS as exc:
                        reply = exc
                    slot = slots.popleft()
                    master.lagging = False  # every earlier reply came first: it has caught up
                    if isinstance(reply, NoScriptError) and fallback is not None:
                        master.scripts.discard(sha)  # the cache was flushed: send the source
                        conn.send_packed_command(conn.pack_command(*fallback[slot]), False)
                        slots.append(slot)
                    elif isinstance(reply, _REPLY_ERRORS):
                        votes.vote(slot, index, ERROR, _error_text(reply))
                    else:
                        if sha is not None:
                            master.scripts.add(sha)
                        votes.count(slot, index, kind, reply)
                if not slots or not conn.can_read(timeout=0):
                    return True
            return True
        except (redis.RedisError, OSError) as exc:
            self._give_up(votes, master, exc)
            slots.clear()
            return False

    @staticmethod
    def _waiting_for(queues: dict) -> bool:
        return any(master.waited for master, _slots in queues.values())

    @staticmethod
    def _abandon(
        master: _Master, slots: deque, fallback: Optional[list[tuple]], timed_out: bool
    ) -> None:
        """The round ended with replies still owed: later rounds read them (see _late_reply)."""
        if len(slots) > MAX_STALE_REPLIES:
            master.drop()
            return
        master.stale = deque(
            (fallback[slot] if fallback is not None else None) if isinstance(slot, int) else slot
            for slot in slots
        )
        if timed_out:  # an early-decided round leaves the flag as it was (as the native engine)
            master.lagging = True

    def _give_up(
        self, votes: _Round, master: _Master, exc: BaseException, unreached: bool = False
    ) -> None:
        """The master failed in this round: each key it has not answered gets one vote for it."""
        if isinstance(exc, _REPLY_ERRORS):
            code, detail = ERROR, _error_text(exc)
        elif isinstance(exc, (redis.TimeoutError, TimeoutError)):
            code, detail = TIMEOUT, str(exc) or "timed out"
        else:
            code, detail = CONN_ERROR, str(exc) or type(exc).__name__
        self._vote_all(votes, master.index, code, detail)
        master.failed(time.monotonic_ns(), detail, unreached)

    @staticmethod
    def _vote_all(votes: _Round, index: int, code: int, detail: Optional[str]) -> None:
        for key in range(len(votes.codes)):
            votes.vote(key, index, code, detail)
