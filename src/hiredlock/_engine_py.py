"""The pure-Python engine: the engine contract (see _contract.py) on redis-py connections.

Every command of a round is written to every master before any reply is read; replies are then read
from whichever socket is ready, until the outcome is decided or the round's deadline passes.
redis-py's own retries are off and every blocking call is bounded by the round's deadline.
"""

from __future__ import annotations

import contextlib
import select
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, Optional

import redis
from redis.backoff import NoBackoff
from redis.connection import Connection, UnixDomainSocketConnection
from redis.exceptions import AuthenticationError, NoScriptError, ResponseError
from redis.retry import Retry

from . import _fork
from ._config import MasterSpec
from ._contract import RoundResult
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
DISCARD = -1  # a reply slot owed to an earlier, abandoned round

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


def _error_text(exc: ResponseError) -> str:
    text = str(exc)
    code = _ERROR_CODES.get(type(exc))
    if isinstance(exc, AuthenticationError):
        code = "NOAUTH" if "required" in text.lower() else "WRONGPASS"
    if code and not text.startswith(code):
        return f"{code} {text}"
    return text


class _Master:
    """One master's connection and what it still owes us."""

    __slots__ = ("backoff_ms", "conn", "down_until", "index", "last_error", "spec", "stale")

    def __init__(self, index: int, spec: MasterSpec) -> None:
        self.index = index
        self.spec = spec
        self.conn: Optional[Connection] = None
        self.stale = 0  # replies owed to abandoned rounds, read and dropped before ours
        self.down_until = 0  # monotonic ns before which acquire does not reconnect
        self.backoff_ms = 0
        self.last_error = ""

    def connection(self, timeout_s: float) -> Connection:
        if self.conn is None:
            common: dict[str, Any] = {
                "db": self.spec.db,
                "username": self.spec.username,
                "password": self.spec.password,
                "socket_timeout": timeout_s,
                "socket_connect_timeout": timeout_s,
                "retry": Retry(NoBackoff(), 0),
                "lib_name": None,
                "lib_version": None,
            }
            if self.spec.path is not None:
                self.conn = UnixDomainSocketConnection(path=self.spec.path, **common)
            else:
                self.conn = Connection(host=self.spec.host, port=self.spec.port, **common)
        self.conn.socket_timeout = timeout_s
        self.conn.socket_connect_timeout = timeout_s
        return self.conn

    def failed(self, now_ns: int, reason: str) -> None:
        """Drops the connection after an error and sets a growing pause before the next connect."""
        self.drop()
        self.last_error = f"not retried yet after: {reason}"
        self.backoff_ms = min(
            RECONNECT_BACKOFF_MAX_MS, max(RECONNECT_BACKOFF_MIN_MS, self.backoff_ms * 2)
        )
        self.down_until = now_ns + self.backoff_ms * 1_000_000

    def drop(self) -> None:
        if self.conn is not None:
            self.conn.disconnect()
        self.stale = 0

    def forget(self) -> None:
        """After fork(): lose the inherited socket without any I/O on it."""
        if self.conn is not None and self.conn._sock is not None:
            with contextlib.suppress(OSError):
                self.conn._sock.detach()  # the fd stays open for the parent's sake
            self.conn._sock = None
        self.conn = None
        self.stale = 0


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
    )

    def __init__(self, n_keys: int, n: int, q: int, t0: int) -> None:
        self.n = n
        self.q = q
        self.t0 = t0
        self.codes = [bytearray([PENDING]) * n for _ in range(n_keys)]
        self.oks = [0] * n_keys
        self.fails = [0] * n_keys
        self.decided_at = [0] * n_keys
        self.details: list[Optional[dict[int, str]]] = [None] * n_keys
        self.undecided = n_keys

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

    def results(self, end_ns: int) -> list[RoundResult]:
        """Masters still pending were SKIPPED if their key was decided, else they TIMED OUT."""
        out = []
        for codes, decided, details in zip(self.codes, self.decided_at, self.details):
            if PENDING in codes:
                codes = codes.replace(b"\xff", bytes([SKIPPED if decided else TIMEOUT]))
            out.append((bytes(codes), (decided or end_ns) - self.t0, details))
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
        return self._round(_KIND_SET, commands, None, timeout_ms, False, True)

    def run_script(
        self,
        sha: bytes,
        source: bytes,
        keys: Sequence[bytes],
        tokens: Sequence[bytes],
        extra_arg: Optional[bytes],
        timeout_ms: float,
        wait_all: bool,
    ) -> list[RoundResult]:
        tail = () if extra_arg is None else (extra_arg,)
        commands = [(b"EVALSHA", sha, b"1", key, token, *tail) for key, token in zip(keys, tokens)]
        fallback = [(b"EVAL", source, b"1", key, token, *tail) for key, token in zip(keys, tokens)]
        return self._round(_KIND_SCRIPT, commands, fallback, timeout_ms, wait_all, False)

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
        timeout_ms: float,
        wait_all: bool,
        honour_backoff: bool,
    ) -> list[RoundResult]:
        if self._generation != _fork.generation():
            for master in self._masters:
                master.forget()
            self._generation = _fork.generation()
        n_keys = len(commands)
        t0 = time.monotonic_ns()
        deadline = t0 + int(timeout_ms * 1_000_000)
        votes = _Round(n_keys, len(self._masters), self._quorum, t0)
        queues: dict[int, tuple[_Master, deque]] = {}  # fd -> (master, reply slots)
        for master in self._masters:
            self._send(master, commands, votes, queues, deadline, honour_backoff)
        poller = select.poll()
        for fd in queues:
            poller.register(fd, select.POLLIN)
        while queues and (wait_all or votes.undecided):
            remaining_ns = deadline - time.monotonic_ns()
            if remaining_ns <= 0:
                break
            for fd, _events in poller.poll(-(-remaining_ns // 1_000_000)):
                master, slots = queues[fd]
                if self._read(master, slots, kind, fallback, votes, deadline) and slots:
                    continue
                del queues[fd]
                poller.unregister(fd)
        end = time.monotonic_ns()
        for master, slots in queues.values():
            self._abandon(master, slots)
        return votes.results(end)

    def _send(
        self,
        master: _Master,
        commands: list[tuple],
        votes: _Round,
        queues: dict,
        deadline: int,
        honour_backoff: bool,
    ) -> None:
        now = time.monotonic_ns()
        try:
            if master.conn is None or master.conn._sock is None:
                if honour_backoff and now < master.down_until:
                    # An acquire does not wait for a master that just failed; release does.
                    self._vote_all(votes, master.index, CONN_ERROR, master.last_error)
                    return
                master.connection(max(deadline - now, 1_000_000) / 1e9).connect()
                master.backoff_ms = 0
                master.stale = 0
            conn = master.conn
            conn.send_packed_command(conn.pack_commands(commands), check_health=False)
        except (redis.RedisError, OSError) as exc:
            self._give_up(votes, master, exc)
            return
        slots = deque([DISCARD] * master.stale)
        slots.extend(range(len(commands)))
        master.stale = 0
        queues[conn._sock.fileno()] = (master, slots)

    def _read(
        self,
        master: _Master,
        slots: deque,
        kind: int,
        fallback: Optional[list[tuple]],
        votes: _Round,
        deadline: int,
    ) -> bool:
        """Reads every reply that is ready; False when the connection failed."""
        conn = master.conn
        index = master.index
        try:
            while slots:
                remaining = (deadline - time.monotonic_ns()) / 1e9
                conn._sock.settimeout(max(remaining, 0.001))  # a half reply costs no more
                try:
                    reply: Any = conn.read_response(disable_decoding=True)
                except NoScriptError as exc:
                    slot = slots.popleft()
                    if slot >= 0 and fallback is not None:
                        conn.send_packed_command(conn.pack_command(*fallback[slot]), False)
                        slots.append(slot)
                    elif slot >= 0:
                        votes.vote(slot, index, ERROR, _error_text(exc))
                    continue
                except ResponseError as exc:
                    reply = exc
                slot = slots.popleft()
                if slot >= 0:
                    if isinstance(reply, ResponseError):
                        votes.vote(slot, index, ERROR, _error_text(reply))
                    elif kind == _KIND_SET:
                        votes.vote(slot, index, OK if reply == b"OK" else TAKEN)
                    else:
                        ok = isinstance(reply, int) and reply > 0
                        votes.vote(slot, index, OK if ok else TAKEN)
                if not slots or not conn.can_read(timeout=0):
                    return True
            return True
        except (redis.RedisError, OSError) as exc:
            self._give_up(votes, master, exc)
            slots.clear()
            return False

    @staticmethod
    def _abandon(master: _Master, slots: deque) -> None:
        """The round ended with replies still owed: they are read and dropped next round."""
        if len(slots) > MAX_STALE_REPLIES:
            master.drop()
        else:
            master.stale = len(slots)

    def _give_up(self, votes: _Round, master: _Master, exc: BaseException) -> None:
        """The master failed in this round: each key it has not answered gets one vote for it."""
        if isinstance(exc, ResponseError):
            code, detail = ERROR, _error_text(exc)
        elif isinstance(exc, (redis.TimeoutError, TimeoutError)):
            code, detail = TIMEOUT, str(exc) or "timed out"
        else:
            code, detail = CONN_ERROR, str(exc) or type(exc).__name__
        self._vote_all(votes, master.index, code, detail)
        master.failed(time.monotonic_ns(), detail)

    @staticmethod
    def _vote_all(votes: _Round, index: int, code: int, detail: Optional[str]) -> None:
        for key in range(len(votes.codes)):
            votes.vote(key, index, code, detail)
