"""TLS for both engines: the channel that carries a connection's bytes through the SSLContext of
the master's options (hiredlock._core.tls_options makes it).

One implementation for both engines, on Python's ssl module with memory BIOs: the engine owns the
non-blocking socket and says when it is readable or writable; the channel reads and writes the
socket itself (never waiting), encrypts what the engine sends and decrypts what arrives. The native
engine keeps its plaintext path in C and calls the channel (with the GIL) only for TLS masters,
so the wheels need no TLS library of their own and an ssl.SSLContext is taken as it is.

A channel's failures are TLSError, whose text is the master's CONN_ERROR vote detail: "TLS: "
and why (the certificate check's own words, the server's alert, the handshake cut short).
"""

from __future__ import annotations

import os
import ssl
from typing import Any, Optional

from .._core.tls_options import TLSConfig

__all__ = ["TLSChannel", "TLSError"]

_RECV_BYTES = 65536


class TLSError(Exception):
    """A TLS connection failed; str() is the reason, as a master's vote detail shows it."""


def describe(exc: BaseException) -> str:
    """A TLS failure in a few words, for a vote's detail."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"TLS: certificate verify failed: {exc.verify_message}"
    if isinstance(exc, ssl.SSLError):
        reason = exc.reason or exc.strerror or str(exc)
        return f"TLS: {str(reason).lower().replace('_', ' ')}"
    if isinstance(exc, OSError):
        return f"TLS: {exc.strerror or exc}"
    return f"TLS: {exc}"


class TLSChannel:
    """One TLS connection over a connected non-blocking socket that the engine owns.

    handshake() is called when the socket is readable or writable until it returns True;
    write() encrypts and sends what the socket takes, keeping the rest (wants_write says so)
    for flush(); read() gives the plaintext that arrived (b"" when only TLS records did).
    Each raises TLSError when the connection is unusable.
    """

    __slots__ = ("_closed", "_heard", "_incoming", "_outgoing", "_sock", "_ssl", "_unsent")

    def __init__(self, config: TLSConfig, sock: Any, host: Optional[str]) -> None:
        """sock: a connected non-blocking socket (or anything with its recv and send)."""
        self._sock = sock
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        name = config.server_hostname or host
        try:
            self._ssl = config.context.wrap_bio(
                self._incoming, self._outgoing, server_hostname=name
            )
        except (ssl.SSLError, ValueError) as exc:
            raise TLSError(describe(exc)) from None
        self._unsent = b""
        self._closed = False
        self._heard = False  # some plaintext came (the server took the handshake)

    @classmethod
    def on_fd(cls, config: TLSConfig, fd: int, host: Optional[str]) -> TLSChannel:
        """A channel on a socket known by its descriptor only (the native engine's, which stays
        the engine's to close)."""
        if os.name == "nt":
            raise TLSError("TLS: the native engine has no TLS on Windows; use backend='python'")
        return cls(config, _Descriptor(fd), host)

    @property
    def wants_write(self) -> bool:
        return bool(self._unsent) or self._outgoing.pending > 0

    def handshake(self) -> bool:
        """One step of the handshake: True once it is over."""
        self._receive(during_handshake=True)
        try:
            self._ssl.do_handshake()
            done = True
        except ssl.SSLWantReadError:
            done = False
        except (ssl.SSLError, OSError) as exc:
            raise TLSError(describe(exc)) from None
        self.flush()
        return done

    def write(self, data: bytes) -> bool:
        """Encrypts `data` and sends what the socket takes; True when nothing is left unsent."""
        try:
            self._ssl.write(data)
        except (ssl.SSLError, OSError) as exc:
            raise TLSError(describe(exc)) from None
        return self.flush()

    def flush(self) -> bool:
        """Sends what is left; True when nothing is left unsent."""
        pending = self._unsent + self._outgoing.read() if self._unsent else self._outgoing.read()
        if not pending:
            self._unsent = b""
            return True
        try:
            sent = self._sock.send(pending)
        except BlockingIOError:
            sent = 0
        except OSError as exc:
            raise TLSError(self._broken(exc)) from None
        self._unsent = pending[sent:]
        return not self._unsent

    def read(self) -> bytes:
        """The plaintext that arrived since the last call (b"" when none did)."""
        self._receive(during_handshake=False)
        chunks = []
        # (read only while records wait: an empty read is an SSLWantReadError, which costs more
        # than the rest of the call)
        while self._incoming.pending or self._ssl.pending() or self._incoming.eof:
            try:
                chunk = self._ssl.read(_RECV_BYTES)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                self._closed = True
                break
            except (ssl.SSLError, OSError) as exc:
                raise TLSError(describe(exc)) from None
            if not chunk:
                self._closed = True
                break
            chunks.append(chunk)
            self._heard = True
        if self._outgoing.pending:  # (a key update, say)
            self.flush()
        if not chunks and self._closed:
            raise TLSError("TLS: connection closed by the master")
        return b"".join(chunks)

    def _receive(self, during_handshake: bool) -> None:
        """Moves what the socket has into the TLS reader, without waiting."""
        if self._closed:
            return
        while True:
            try:
                data = self._sock.recv(_RECV_BYTES)
            except BlockingIOError:
                return
            except OSError as exc:
                raise TLSError(self._broken(exc)) from None
            if not data:
                if during_handshake:
                    raise TLSError("TLS: connection closed by the master during the handshake")
                self._incoming.write_eof()
                self._closed = True
                return
            self._incoming.write(data)
            if len(data) < _RECV_BYTES:
                return

    def _broken(self, exc: OSError) -> str:
        """Why the socket failed. A TLS 1.3 server that wants a client certificate says so only
        after the client's side of the handshake is over, then closes: the first command meets a
        reset, and its alert is often lost with it."""
        if isinstance(exc, (ConnectionResetError, BrokenPipeError)) and not self._heard:
            return (
                f"{describe(exc)} right after the handshake (does the master require a client "
                "certificate? see ssl_certfile)"
            )
        return describe(exc)


class _Descriptor:
    """recv() and send() on a socket's descriptor, which somebody else owns and closes."""

    __slots__ = ("_fd",)

    def __init__(self, fd: int) -> None:
        self._fd = fd

    def recv(self, size: int) -> bytes:
        return os.read(self._fd, size)

    def send(self, data: bytes) -> int:
        return os.write(self._fd, data)
