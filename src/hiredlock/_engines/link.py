"""One pure-Python connection to a master, as the python engine's masters (_engines/master.py)
and the release-notice subscribers (_engines/notices.py) both use it: the non-blocking connect
(started by _engines/connect.py), a TLS master's channel and handshake, buffered writes, reads,
and closing. What is sent and what the replies mean is each user's own.

A failure is raised as Broken, whose text is what a master's vote says about it (a TLS failure's
own words, PLAINTEXT_RESET, "connection closed by the master"...).
"""

from __future__ import annotations

import os
import socket
from typing import Any, Optional

from .._core.masters import MasterSpec
from .connect import PLAINTEXT_RESET, login_commands, place_of, start_connect
from .poller import POLLIN, POLLOUT
from .resp import Reader
from .tls import TLSChannel, TLSError

DOWN = 0
CONNECTING = 1  # the TCP connect, then a TLS master's handshake
READY = 2

# A TLS link's `unsent`: its channel keeps what the socket did not take yet.
IN_CHANNEL = memoryview(b"")

RECV_BYTES = 65536

CLOSED_BY_MASTER = "connection closed by the master"

# Connections closed by this process's python engines (Link.close): the asyncio driver keeps
# sockets registered on its loop between rounds, and a change here tells it a registered
# descriptor may have closed (and its number come back as another socket). Only ever
# incremented: a lost increment between threads still changes the value.
closed_count = 0


class Broken(OSError):
    """The connection cannot be used; str() is why, as a master's vote detail says it."""


def os_error_text(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


class Link:
    """One master's connection: its socket, a TLS master's channel, and the bytes the socket has
    not taken yet."""

    __slots__ = (
        "address",
        "channel",
        "heard",
        "login",
        "n_login",
        "place",
        "reader",
        "sock",
        "spec",
        "state",
        "unsent",
    )

    def __init__(self, spec: MasterSpec) -> None:
        self.spec = spec
        # what _resolver looks up for this master's address (a host name, or a Sentinel
        # group), or None: a unix socket or a numeric address needs no lookup
        self.place: Any = place_of(spec)
        self.address: Any = None  # the looked-up address its connection went to
        self.login, self.n_login = login_commands(spec)  # AUTH and SELECT, as needed
        self.sock: Optional[socket.socket] = None
        # a TLS master's channel (see _engines/tls.py), made once the TCP connect is confirmed:
        # every byte of the connection goes through it
        self.channel: Optional[TLSChannel] = None
        self.state = DOWN
        self.reader = Reader()
        # Bytes the socket has not taken yet (written as it becomes writable): a stopped master
        # with full buffers must not hold up the others.
        self.unsent: Optional[memoryview] = None
        self.heard = False  # some reply came on this connection

    def start(self, address: Any) -> bool:
        """Starts a non-blocking connect (a unix socket path, or a resolved Address); True when
        it connected at once (a TLS master's handshake is still to come). Raises OSError."""
        sock, connected = start_connect(self.spec, address)
        self.address = address
        self.sock = sock
        self.channel = None
        self.state = CONNECTING
        self.reader = Reader()
        self.unsent = None
        self.heard = False
        return connected

    def connected(self) -> bool:
        """Takes a connection that is CONNECTING a step further when its socket is ready:
        confirms the connect, makes a TLS master's channel, runs its handshake; True when it is
        over (the caller then marks it READY). Raises Broken."""
        if self.channel is None:
            error = self.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)  # type: ignore[union-attr]
            if error:
                raise Broken(os.strerror(error))
            tls = self.spec.tls
            if tls is None:
                return True
            try:
                # (a Sentinel group's master is known by the address the sentinels gave)
                host = self.spec.host or self.address.host
                self.channel = TLSChannel(tls, self.sock, host)
            except TLSError as exc:
                raise Broken(str(exc)) from None
        try:
            if not self.channel.handshake():
                return False
        except TLSError as exc:
            raise Broken(str(exc)) from None
        if self.channel.wants_write:
            self.unsent = IN_CHANNEL
        return True

    def events_wanted(self) -> int:
        """What the connection waits for: the end of its connect or handshake, or replies (and
        room for what is left to write)."""
        if self.state == CONNECTING:
            return POLLOUT if self.channel is None else handshake_events(self.channel)
        return POLLIN if self.unsent is None else POLLIN | POLLOUT

    def push(self, data: bytes) -> None:
        """Writes what the socket takes now; the rest waits in `unsent`. Raises Broken."""
        if self.channel is not None:
            try:
                if not self.channel.write(data):
                    self.unsent = IN_CHANNEL
            except TLSError as exc:
                raise Broken(str(exc)) from None
            return
        if self.unsent is not None:
            self.unsent = memoryview(bytes(self.unsent) + data)
            return
        try:
            sent = self.sock.send(data)  # type: ignore[union-attr]
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            raise Broken(self.broken(exc)) from None
        if sent < len(data):
            self.unsent = memoryview(data)[sent:]

    def flush(self) -> None:
        """Writes more of `unsent` (None once all is written). Raises Broken."""
        if self.channel is not None:
            try:
                if self.channel.flush():
                    self.unsent = None
            except TLSError as exc:
                raise Broken(str(exc)) from None
            return
        unsent = self.unsent
        if unsent is None:
            return
        try:
            sent = self.sock.send(unsent)  # type: ignore[union-attr]
        except BlockingIOError:
            return
        except OSError as exc:
            raise Broken(self.broken(exc)) from None
        self.unsent = unsent[sent:] if sent < len(unsent) else None

    def receive(self) -> bytes:
        """What arrived, without waiting (b"" when nothing did, or TLS records only). Raises
        Broken."""
        channel = self.channel
        if channel is not None:
            try:
                return channel.read()
            except TLSError as exc:
                raise Broken(str(exc)) from None
        try:
            data = self.sock.recv(RECV_BYTES)  # type: ignore[union-attr]
        except BlockingIOError:
            return b""
        except OSError as exc:
            raise Broken(self.broken(exc)) from None
        if not data:
            raise Broken(CLOSED_BY_MASTER)
        return data

    def broken(self, exc: OSError) -> str:
        """Why a plaintext connection failed to read or write (see connect.PLAINTEXT_RESET)."""
        if (
            isinstance(exc, (ConnectionResetError, BrokenPipeError))
            and not self.heard
            and self.spec.tls is None
            and self.spec.path is None
        ):
            return PLAINTEXT_RESET
        return os_error_text(exc)

    def close(self) -> None:
        """Closes the connection. Only close(): no bytes are sent, which is what a forked child
        needs too (its parent's copy of the socket stays open and usable)."""
        global closed_count
        sock, self.sock = self.sock, None
        if sock is not None:
            closed_count += 1
            sock.close()
        self.channel = None
        self.state = DOWN
        self.unsent = None


def handshake_events(channel: TLSChannel) -> int:
    """What a TLS handshake in progress waits for: the server's records (and room to send)."""
    return POLLIN | POLLOUT if channel.wants_write else POLLIN
