"""How a connection to a master starts, for every pure-Python connection hiredlock makes (the
python engine's, and the release-notice subscribers' of _engines/notices.py): where its address
comes from, the non-blocking connect, and the login commands; and, for both engines, what a vote
says when a connection does not get that far."""

from __future__ import annotations

import errno
import os
import socket
from typing import Any, Optional

from .._core.masters import MasterSpec
from . import resolver as _resolver
from .resp import pack_auth, pack_command

_IN_PROGRESS = frozenset(
    {0, errno.EINPROGRESS, errno.EAGAIN, errno.EWOULDBLOCK, getattr(errno, "WSAEWOULDBLOCK", -1)}
)

# What a master's vote says when its connection did not start. Both engines take these texts from
# here (the native engine at import), so that a failure reads the same whichever engine met it.
# - the TCP connect did not complete in time:
CONNECT_TIMED_OUT = "connect timed out"
# - the TCP connect did, the TLS handshake did not: most often a plaintext master, which takes the
#   ClientHello for the start of a command line and waits for the rest of it:
TLS_HANDSHAKE_TIMED_OUT = "TLS handshake timed out: does the master speak TLS?"
# - a plaintext connection reset (or its writes refused by a reset) before any reply came: what a
#   TLS port does with our commands, which are no handshake:
PLAINTEXT_RESET = "connection reset by peer: is this a TLS port (use rediss://)?"


# A connect that fails for want of this process's own resources (descriptors, socket buffers,
# memory) says nothing about the master: its vote says it is a local error, and it starts no
# reconnect backoff (the next round tries again, once the load has dropped). Both engines.
LOCAL_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
LOCAL_ERROR_PREFIX = "local error (not the master's): "


def local_error(reason: str) -> str:
    """A local connect failure's vote detail."""
    return LOCAL_ERROR_PREFIX + reason


def place_of(spec: MasterSpec) -> Any:
    """What _resolver looks up for this master's address (a host name, or a Sentinel group), or
    None: a unix socket or a numeric address needs no lookup."""
    if spec.sentinel is not None:
        return spec.sentinel
    if spec.path is None and _resolver.numeric_family(spec.host) is None:  # type: ignore[arg-type]
        return (spec.host, spec.port)
    return None


def direct_address(spec: MasterSpec) -> Optional[_resolver.Address]:
    """The address of a master that needs no lookup (see place_of): None for a unix socket."""
    if spec.path is not None:
        return None
    host = spec.host
    family = None if host is None else _resolver.numeric_family(host)
    assert host is not None and family is not None  # place_of() found nothing to look up
    return _resolver.Address(family, host, spec.port)


def login_commands(spec: MasterSpec) -> tuple[bytes, int]:
    """AUTH [username] password and SELECT db, as needed; (the commands, how many)."""
    commands = []
    if spec.password is not None:
        commands.append(pack_auth(spec.username, spec.password))
    if spec.db:
        commands.append(pack_command((b"SELECT", b"%d" % spec.db)))
    return b"".join(commands), len(commands)


def start_connect(
    spec: MasterSpec, address: Optional[_resolver.Address]
) -> tuple[socket.socket, bool]:
    """A non-blocking socket connecting to the master (a unix socket path when address is None,
    else a resolved _resolver.Address); (the socket, True when it connected at once). Raises
    OSError."""
    if spec.path is not None:
        # (no AF_UNIX in Windows' stubs)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # type: ignore[attr-defined,unused-ignore]
        target: Any = spec.path
    else:
        assert address is not None  # a TCP master's is always given
        sock = socket.socket(address.family, socket.SOCK_STREAM)
        target = (address.host, address.port)
    try:
        if spec.path is None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
        error = sock.connect_ex(target)
        if error not in _IN_PROGRESS:
            raise OSError(error, os.strerror(error))
    except BaseException:
        sock.close()
        raise
    return sock, error == 0
