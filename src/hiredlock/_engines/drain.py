"""Connections closed while their master still owes replies: half-closed and read to their end.

A client that closes an engine while a master still owes it replies (a stopped or slow master:
commands written, not answered yet) must not simply close those sockets. A resumed Redis reads
what a closed client wrote in chunks, runs the first, finds the socket reset when it answers, and
frees the client with the rest unread: the releases queued behind the SETs never run, and their
keys stay until their ttl (redis-server 7.0 ran only the first ~36 KB of such a pipeline).
Half-closed instead (shutdown(SHUT_WR): the server reads to the end of the stream, after the last
command) and kept open, the connection has every command written to it run; its replies are read
and dropped here until the server closes it or DRAIN_MAX_S have passed.

The engine's owner (the pool, the asyncio rounds) hands over a copy of each such socket (a dup of
its descriptor) before closing the engine as usual; never in a forked child (a half-close would
end the parent's connection). One daemon thread per process reads them, started by the first
socket handed over and ended when none is left (so a client that waits for nothing keeps none);
a forked child forgets the parent's copies.
"""

from __future__ import annotations

import os
import select
import socket
import threading
import time
from typing import Any, Optional

# How long a half-closed connection is kept for a master that does not answer (stopped): the
# commands written to it run if it resumes within that time.
DRAIN_MAX_S = 60.0
_SLICE_S = 0.1  # (the thread looks for new sockets and deadlines this often)

_mutex = threading.Lock()
_draining: dict[int, tuple[socket.socket, float]] = {}  # fd -> (socket, deadline)
_thread: Optional[threading.Thread] = None


def hand_over(fd: int) -> None:
    """Half-closes the connection on descriptor `fd` and reads it to its end in the background,
    on a copy of the descriptor (the caller closes its own as usual). Nothing happens when the
    connection is gone already."""
    global _thread
    try:
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        return
    try:
        sock.shutdown(socket.SHUT_WR)
        sock.setblocking(False)
    except OSError:
        sock.close()
        return
    with _mutex:
        _draining[sock.fileno()] = (sock, time.monotonic() + DRAIN_MAX_S)
        if _thread is None:
            _thread = threading.Thread(target=_run, name="hiredlock-drain", daemon=True)
            _thread.start()


def close_draining(engine: Any) -> None:
    """Closes an engine, its connections that still owe replies handed over first."""
    for fd in engine.owed_fds():
        hand_over(fd)
    engine.close()


def draining() -> int:
    """How many connections are being read to their end now."""
    return len(_draining)


def _run() -> None:
    global _thread
    while True:
        with _mutex:
            now = time.monotonic()
            for fd, (sock, deadline) in list(_draining.items()):
                if now >= deadline:
                    del _draining[fd]
                    sock.close()
            if not _draining:
                _thread = None
                return
            socks = [sock for sock, _deadline in _draining.values()]
        try:
            readable, _, _ = select.select(socks, [], [], _SLICE_S)
        except (OSError, ValueError):  # (closed meanwhile: looked at again next time)
            continue
        for sock in readable:
            try:
                done = not sock.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                done = True
            if done:
                with _mutex:
                    _draining.pop(sock.fileno(), None)
                sock.close()


def _forget_in_child() -> None:
    global _thread, _mutex, _draining
    for sock, _deadline in _draining.values():
        sock.close()  # (our copies: the parent's stay open)
    _draining = {}
    _mutex = threading.Lock()
    _thread = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
