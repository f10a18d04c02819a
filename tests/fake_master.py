"""A fake Redis master on a loopback port, for replies no real redis-server sends: garbage,
replies dripped a byte at a time, endless or huge replies.

It speaks just enough RESP2 for a lock cycle (SET NX PX, the release, unlock-after-failure and
extend scripts, AUTH, SELECT, PING; anything else, SUBSCRIBE included, gets +OK) on a dict of its
own. The first `bad_connections` connections it accepts answer their first command with
`misbehave(sock)` instead, and then only read until the client hangs up: the client has to
notice the bad reply by itself.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Callable, Optional

from hiredlock._scripts import EXTEND, RELEASE, RELEASE_AFTER_FAILURE

Misbehave = Callable[[socket.socket], None]


def send_forever(sock: socket.socket, head: bytes, chunk: bytes, limit: int) -> None:
    """Sends head, then chunk after chunk (at most `limit` bytes) until the client hangs up."""
    with contextlib.suppress(OSError):
        sock.sendall(head)
        sent = 0
        while sent < limit:
            sock.sendall(chunk)
            sent += len(chunk)


def drip(sock: socket.socket, data: bytes, every_s: float, stop: threading.Event) -> None:
    """Sends data one byte every `every_s` seconds, until done, the client hangs up or `stop`."""
    with contextlib.suppress(OSError):
        for i in range(len(data)):
            if stop.wait(every_s):
                return
            sock.sendall(data[i : i + 1])


class FakeMaster:
    def __init__(self, misbehave: Optional[Misbehave] = None, bad_connections: int = 1) -> None:
        self.misbehave = misbehave
        self.bad_connections = bad_connections
        self.accepted = 0
        self.data: dict[bytes, bytes] = {}
        self.stop = threading.Event()
        self._mutex = threading.Lock()
        self._conns: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.port = self.listener.getsockname()[1]
        self._start(self._accept_loop)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def close(self) -> None:
        self.stop.set()
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        with self._mutex:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        for thread in self._threads:
            thread.join(10)

    def _start(self, target: Callable, *args) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True, name="fake-master")
        self._threads.append(thread)
        thread.start()

    def _accept_loop(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with self._mutex:
                self.accepted += 1
                bad = self.misbehave is not None and self.accepted <= self.bad_connections
                self._conns.append(conn)
            self._start(self._serve, conn, bad)

    def _serve(self, conn: socket.socket, bad: bool) -> None:
        buffer = b""
        try:
            while not self.stop.is_set():
                command, buffer = _parse_command(buffer)
                if command is None:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buffer += data
                    continue
                if bad:
                    assert self.misbehave is not None
                    self.misbehave(conn)
                    while conn.recv(65536):  # only the client hangs up
                        pass
                    return
                conn.sendall(self._answer(command))
        except OSError:
            return

    def _answer(self, command: list[bytes]) -> bytes:
        name = command[0].upper()
        with self._mutex:
            if name == b"SET":
                key, value = command[1], command[2]
                if key in self.data:
                    return b"$-1\r\n"
                self.data[key] = value
                return b"+OK\r\n"
            if name in (b"EVAL", b"EVALSHA"):
                script = command[1]
                key, token = command[3], command[4]
                ours = self.data.get(key) == token
                if script in (RELEASE.sha, RELEASE.source):
                    if ours:
                        del self.data[key]
                    return b":1\r\n" if ours else b":0\r\n"
                if script in (RELEASE_AFTER_FAILURE.sha, RELEASE_AFTER_FAILURE.source):
                    if ours:
                        del self.data[key]
                        return b":1\r\n"
                    # (-1: held by another, without expiry: the fake keeps no ttl)
                    return b":0\r\n" if key not in self.data else b":-1\r\n"
                if script in (EXTEND.sha, EXTEND.source):
                    return b":1\r\n" if ours else b":0\r\n"
                return b"-NOSCRIPT No matching script.\r\n"
            return b"+OK\r\n"


def _parse_command(buffer: bytes) -> tuple[Optional[list[bytes]], bytes]:
    """The RESP array of bulk strings at the front of buffer: (command, rest), or (None, buffer)."""
    end = buffer.find(b"\r\n")
    if end < 0:
        return None, buffer
    count = int(buffer[1:end])
    pos = end + 2
    parts = []
    for _ in range(count):
        end = buffer.find(b"\r\n", pos)
        if end < 0:
            return None, buffer
        length = int(buffer[pos + 1 : end])
        start = end + 2
        if len(buffer) < start + length + 2:
            return None, buffer
        parts.append(buffer[start : start + length])
        pos = start + length + 2
    return parts, buffer[pos:]
