"""TLS for both engines: the options a master takes, the SSLContext made from them, and the channel
that carries a connection's bytes through it.

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
from dataclasses import dataclass, field
from typing import Any, Optional

__all__ = ["TLS_OPTIONS", "TLSChannel", "TLSConfig", "TLSError", "tls_config"]

# The options a master's dict (or a rediss:// URL's query) may give, as redis-py names them.
TLS_OPTIONS = frozenset(
    {
        "ssl_ca_certs",
        "ssl_ca_path",
        "ssl_ca_data",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_password",
        "ssl_cert_reqs",
        "ssl_check_hostname",
        "ssl_min_version",
        "ssl_ciphers",
        "ssl_server_hostname",
        "ssl_context",
    }
)

_CERT_REQS = {
    "required": ssl.CERT_REQUIRED,
    "optional": ssl.CERT_OPTIONAL,
    "none": ssl.CERT_NONE,
}
_VERSIONS = {
    "TLSv1_2": ssl.TLSVersion.TLSv1_2,
    "TLSv1.2": ssl.TLSVersion.TLSv1_2,
    "TLSv1_3": ssl.TLSVersion.TLSv1_3,
    "TLSv1.3": ssl.TLSVersion.TLSv1_3,
}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_RECV_BYTES = 65536


class TLSError(Exception):
    """A TLS connection failed; str() is the reason, as a master's vote detail shows it."""


@dataclass(frozen=True)
class TLSConfig:
    """A master's TLS settings: the context its connections use, and the name they check."""

    context: ssl.SSLContext = field(compare=False)
    # the name sent as SNI and checked against the certificate (None: the master's host)
    server_hostname: Optional[str] = None

    def __repr__(self) -> str:  # a context says nothing secret, but nothing useful either
        name = "" if self.server_hostname is None else f", server_hostname={self.server_hostname!r}"
        return f"TLSConfig(verify_mode={self.context.verify_mode.name}{name})"


def tls_config(options: dict, where: str) -> TLSConfig:
    """The TLSConfig for a master's ssl_* options (all files are read here, before any I/O).

    ValueError or TypeError, naming `where` and the option, for anything that cannot be used.
    """
    server_hostname = options.get("ssl_server_hostname")
    if server_hostname is not None and not (isinstance(server_hostname, str) and server_hostname):
        raise ValueError(f"{where}: ssl_server_hostname must be a non-empty str")
    given = options.get("ssl_context")
    if given is not None:
        if not isinstance(given, ssl.SSLContext):
            raise TypeError(
                f"{where}: ssl_context must be an ssl.SSLContext, not {type(given).__name__}"
            )
        others = sorted(TLS_OPTIONS.intersection(options) - {"ssl_context", "ssl_server_hostname"})
        if others:
            raise ValueError(
                f"{where}: ssl_context is used as it is: {', '.join(others)} cannot go with it"
            )
        return TLSConfig(given, server_hostname)
    cert_reqs = _cert_reqs(options.get("ssl_cert_reqs", "required"), where)
    default_check = cert_reqs == ssl.CERT_REQUIRED
    check_hostname = _flag(options.get("ssl_check_hostname", default_check), where)
    if check_hostname and cert_reqs == ssl.CERT_NONE:
        raise ValueError(
            f"{where}: ssl_check_hostname needs ssl_cert_reqs 'required' or 'optional'"
        )
    context = _context_trusting(options, where)
    context.check_hostname = False  # (before verify_mode may become CERT_NONE)
    context.verify_mode = cert_reqs
    context.check_hostname = check_hostname
    min_version = options.get("ssl_min_version")
    if min_version is not None:
        context.minimum_version = _version(min_version, where)
    certfile = _path(options, "ssl_certfile", where)
    keyfile = _path(options, "ssl_keyfile", where)
    password = options.get("ssl_password")
    if keyfile is not None and certfile is None:
        raise ValueError(f"{where}: ssl_keyfile needs ssl_certfile")
    if password is not None and not isinstance(password, (str, bytes)):
        raise TypeError(f"{where}: ssl_password must be str or bytes")
    if certfile is not None:
        try:
            context.load_cert_chain(certfile, keyfile, password)
        except (OSError, ssl.SSLError, ValueError) as exc:
            raise ValueError(
                f"{where}: ssl_certfile/ssl_keyfile cannot be used: {_why(exc)}"
            ) from None
    ciphers = options.get("ssl_ciphers")
    if ciphers is not None:
        try:
            context.set_ciphers(ciphers)
        except (ssl.SSLError, TypeError) as exc:
            raise ValueError(f"{where}: ssl_ciphers cannot be used: {_why(exc)}") from None
    return TLSConfig(context, server_hostname)


def _context_trusting(options: dict, where: str) -> ssl.SSLContext:
    """A client context that trusts the CAs the options name (the system's when none)."""
    ca_certs = _path(options, "ssl_ca_certs", where)
    ca_path = _path(options, "ssl_ca_path", where)
    ca_data = options.get("ssl_ca_data")
    if ca_data is not None and not isinstance(ca_data, (str, bytes)):
        raise TypeError(f"{where}: ssl_ca_data must be str or bytes, not {type(ca_data).__name__}")
    try:
        return ssl.create_default_context(cafile=ca_certs, capath=ca_path, cadata=ca_data)
    except (OSError, ssl.SSLError, ValueError) as exc:
        which = "ssl_ca_data" if ca_certs is None and ca_path is None else "ssl_ca_certs/ca_path"
        raise ValueError(f"{where}: {which} cannot be used: {_why(exc)}") from None


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror if exc.filename is None else f"{exc.strerror}: {exc.filename!r}"
    return str(exc) or type(exc).__name__


def _path(options: dict, key: str, where: str) -> Optional[str]:
    value = options.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ValueError(f"{where}: {key} must be a non-empty str (a file's path)")
    return value


def _cert_reqs(value: Any, where: str) -> ssl.VerifyMode:
    if isinstance(value, ssl.VerifyMode):
        return value
    if isinstance(value, str) and value.lower() in _CERT_REQS:
        return _CERT_REQS[value.lower()]
    raise ValueError(
        f"{where}: ssl_cert_reqs must be 'required', 'optional' or 'none', got {value!r}"
    )


def _flag(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
        return value.lower() in _TRUE
    raise ValueError(f"{where}: ssl_check_hostname must be true or false, got {value!r}")


def _version(value: Any, where: str) -> ssl.TLSVersion:
    if isinstance(value, ssl.TLSVersion):
        return value
    if isinstance(value, str) and value in _VERSIONS:
        return _VERSIONS[value]
    raise ValueError(f"{where}: ssl_min_version must be 'TLSv1_2' or 'TLSv1_3', got {value!r}")


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
