"""Connections closed while their master still owes replies: half-closed and kept open.

A client that closes an engine while a master still owes it replies (a stopped or slow master:
commands written, not answered yet) must not simply close those sockets. A resumed Redis reads
what a closed client wrote in chunks, runs the first, finds the socket reset when it answers, and
frees the client with the rest unread: the releases queued behind the SETs never run, and their
keys stay until their ttl (redis-server 7.0 ran only the first ~36 KB of such a pipeline).
Half-closed instead (shutdown(SHUT_WR): the server reads to the end of the stream, after the last
command) and kept open, the connection has every command written to it run, whether or not its
replies are ever read (the server keeps what the socket cannot take).

Only a connection with every byte of its commands written is handed over: one with bytes still
unsent (its master stopped reading) would have the commands written so far run without those
that followed them (an attempt's unlock), so it is closed as before.

No thread and no timer: the engine's owner (the pool, the asyncio rounds) hands over a copy of
each such socket (a dup of its descriptor) before closing the engine as usual, and each hand-over
first closes the copies kept longer than KEEP_S, and those the server has closed already. What is
left when the process ends is closed with it. Never in a forked child (a half-close would end the
parent's connection): the engines hand over nothing there, and a child forgets the parent's
copies.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

# How long a half-closed connection is kept at least: the commands written to it run if its
# master resumes within that time.
KEEP_S = 60.0

_mutex = threading.Lock()
_kept: list[tuple[socket.socket, float]] = []  # (socket, kept until)


def close_draining(engine: Any) -> None:
    """Closes an engine, its connections that still owe replies handed over first."""
    for fd in engine.owed_fds():
        hand_over(fd)
    engine.close()


def hand_over(fd: int) -> None:
    """Half-closes the connection on descriptor `fd` and keeps a copy of the descriptor open (the
    caller closes its own as usual). Nothing happens when the connection is gone already."""
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
        _prune()
        _kept.append((sock, time.monotonic() + KEEP_S))


def kept() -> int:
    """How many half-closed connections are kept now."""
    with _mutex:
        _prune()
        return len(_kept)


def _prune() -> None:
    """Closes the copies kept long enough, and those whose server is done (replies read and
    dropped, then the end of the stream)."""
    now = time.monotonic()
    keep = []
    for sock, until in _kept:
        if now < until and not _finished(sock):
            keep.append((sock, until))
        else:
            sock.close()
    _kept[:] = keep


def _finished(sock: socket.socket) -> bool:
    while True:
        try:
            if not sock.recv(65536):
                return True
        except BlockingIOError:
            return False
        except OSError:
            return True


def _forget_in_child() -> None:
    global _mutex
    for sock, _until in _kept:
        sock.close()  # (our copies: the parent's stay open)
    _kept.clear()
    _mutex = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)
