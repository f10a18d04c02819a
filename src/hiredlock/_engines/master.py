"""The pure-Python engine's masters: one connection per master and what it still owes us (the
native engine's part of the same name: _native/master.pxi).

Every reply a connection owes is accounted for, in order (_Master.owed): the login's first, then
those owed to abandoned rounds (read and dropped by later rounds), then this round's. What a
master's failures mean for later rounds (backoff, lagging, READONLY, Sentinel groups) is not
here: see _engines/master_policy.py.
"""

from __future__ import annotations

import select
import socket
from collections import deque
from typing import Any, Optional

from .._core.masters import MasterSpec
from .._core.scripts import Outcome
from .connect import PLAINTEXT_RESET, login_commands, place_of, start_connect
from .poller import POLLIN, POLLOUT
from .resp import Reader
from .tls import TLSChannel, TLSError

OK = int(Outcome.OK)
TAKEN = int(Outcome.TAKEN)
TIMEOUT = int(Outcome.TIMEOUT)
CONN_ERROR = int(Outcome.CONN_ERROR)
ERROR = int(Outcome.ERROR)
SKIPPED = int(Outcome.SKIPPED)
PENDING = 255

KIND_SET = 0
KIND_SCRIPT = 1

DOWN = 0
CONNECTING = 1
READY = 2

# What each reply a connection owes answers (_Master.owed): an int k is item k of the current
# round; LOGIN the reply to AUTH or SELECT; None a reply owed to an abandoned round, dropped when
# read; bytes too, but if that reply says NOSCRIPT those bytes (the script's EVAL) are sent then,
# so that a master that answered late still runs the release or extend it was sent.
LOGIN = "login"

# A TLS master's `unsent`: its channel keeps what the socket did not take yet.
IN_CHANNEL = memoryview(b"")

RECV_BYTES = 65536
# A connection the master closed shows as one of these in the idle check before a round.
POLLRDHUP = getattr(select, "POLLRDHUP", 0)
HUNG_UP = (
    POLLRDHUP
    | getattr(select, "POLLHUP", 0)
    | getattr(select, "POLLERR", 0)
    | getattr(select, "POLLNVAL", 0)
)


def os_error_text(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


class Master:
    """One master's connection and what it still owes us."""

    __slots__ = (
        "address",
        "bit",
        "busy",
        "channel",
        "connect_deadline",
        "deadline",
        "fd",
        "fresh",
        "heard",
        "index",
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
        "unsent",
        "waited",
    )

    def __init__(self, index: int, spec: MasterSpec) -> None:
        self.index = index
        self.bit = 1 << index  # its bit in the masks of _engines/master_policy.py
        self.spec = spec
        # what _resolver looks up for this master's address (a host name, or a Sentinel
        # group), or None: a unix socket or a numeric address needs no lookup
        self.place: Any = place_of(spec)
        self.address: Any = None  # the looked-up address its connection went to
        self.login, self.n_login = login_commands(spec)
        self.sock: Optional[socket.socket] = None
        # a TLS master's channel (see _engines/tls.py), made once the TCP connect is confirmed:
        # every byte of the connection goes through it
        self.channel: Optional[TLSChannel] = None
        self.fd = -1
        self.state = DOWN
        self.reader = Reader()
        self.owed: deque[Any] = deque()
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
        self.waited = True  # rounds that wait for all wait for it (see master_policy: lagging)

    def open(self, address: Any) -> None:
        """Starts a non-blocking connect (a unix socket path, or a resolved Address)."""
        self.address = address
        sock, connected = start_connect(self.spec, address)
        self.sock = sock
        self.fd = sock.fileno()
        self.channel = None
        # (a TLS connection is not ready before its handshake: _Round._connected runs it)
        self.state = READY if connected and self.spec.tls is None else CONNECTING
        self.reader = Reader()
        self.owed = deque()
        self.scripts = set()
        self.unsent = None
        self.heard = False
        self.login_due = self.n_login > 0
        self.unqueued = True

    def push(self, data: bytes) -> Optional[str]:
        """Writes what the socket takes now; the rest waits in `unsent`. An error text, or None."""
        if self.channel is not None:
            try:
                if not self.channel.write(data):
                    self.unsent = IN_CHANNEL
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
        return os_error_text(exc)

    def drop(self) -> None:
        """Closes the connection. Only close(): no bytes are sent, which is what a forked child
        needs too (its parent's copy of the socket stays open and usable)."""
        sock, self.sock = self.sock, None
        if sock is not None:
            sock.close()
        self.channel = None
        self.fd = -1
        self.state = DOWN
        self.owed = deque()
        self.scripts = set()
        self.unsent = None
        self.todo = 0


def events_wanted(master: Master) -> int:
    """What a round waits for on a master's socket: the end of its connect, or replies (and room
    for what is left to write)."""
    if master.state == CONNECTING:
        return POLLOUT if master.channel is None else handshake_events(master.channel)
    return POLLIN if master.unsent is None else POLLIN | POLLOUT


def handshake_events(channel: TLSChannel) -> int:
    """What a TLS handshake in progress waits for: the server's records (and room to send)."""
    return POLLIN | POLLOUT if channel.wants_write else POLLIN
