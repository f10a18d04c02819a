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
import heapq
import json
import os
import selectors
import socket
import subprocess
import sys
import threading
import time
from typing import Callable, Optional

from hiredlock._core.scripts import EXTEND, RELEASE, RELEASE_AFTER_FAILURE

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


class TimedMasters:
    """Fake masters that answer when a test says, for the engines' stop rules; they run in a child
    process of their own (one event loop, no threads), so that their timing does not depend on
    the test process's threads (the client under test holds its GIL at times).

    plans: one dict per master, of `delay` (seconds between a command's arrival and its answer,
    None: never; default 0), `taken` (SET gets a nil, a script :0; default: +OK, :1) and
    `flush_only` (a connection's first bytes are answered with one reply at once, and nothing
    more is read from it: its sender is left with bytes it cannot write). Other commands get +OK.
    set(i, ...) changes master i's plan for the commands that arrive afterwards; hang_up(i) closes
    its connections from its side (the client's next round opens a new one); each returns once
    the child has done it.
    """

    def __init__(self, plans: list[dict]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), json.dumps(plans)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        self.ports: list[int] = self._answer()

    @property
    def urls(self) -> list[str]:
        return [f"redis://127.0.0.1:{port}/0" for port in self.ports]

    def set(self, i: int, **plan) -> None:
        self._ask({"op": "set", "i": i, "plan": plan})

    def hang_up(self, i: int) -> None:
        self._ask({"op": "hang_up", "i": i})

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()  # type: ignore[union-attr]
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def _ask(self, request: dict) -> None:
        self.proc.stdin.write((json.dumps(request) + "\n").encode())  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        self._answer()

    def _answer(self):
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise RuntimeError("the fake masters' process exited")
        return json.loads(line)


def _command_name(buffer: bytearray) -> tuple[Optional[bytes], int]:
    """The name of the whole RESP command at the front of buffer and its length, or (None, 0)
    while it has not all come (its arguments are skipped, not copied: they may be large)."""
    end = buffer.find(b"\r\n")
    if end < 0:
        return None, 0
    count = int(buffer[1:end])
    pos = end + 2
    name = None
    for _ in range(count):
        end = buffer.find(b"\r\n", pos)
        if end < 0:
            return None, 0
        length = int(buffer[pos + 1 : end])
        start = end + 2
        if len(buffer) < start + length + 2:
            return None, 0
        if name is None:
            name = bytes(buffer[start : start + length])
        pos = start + length + 2
    return name, pos


def _timed_answer(plan: dict, name: bytes) -> bytes:
    name = name.upper()
    taken = plan.get("taken", False)
    if name == b"SET":
        return b"$-1\r\n" if taken else b"+OK\r\n"
    if name in (b"EVAL", b"EVALSHA"):
        return b":0\r\n" if taken else b":1\r\n"
    return b"+OK\r\n"


def _serve_timed(plans: list[dict]) -> None:
    """The child process of TimedMasters: every listener, connection and the control pipe on one
    selector; answers go out at their time, in order on each connection."""
    selector = selectors.DefaultSelector()
    listeners = []
    for i in range(len(plans)):
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        selector.register(listener, selectors.EVENT_READ, ("accept", i))
        listeners.append(listener)
    conns: dict[socket.socket, dict] = {}
    due: list = []  # heap of (when, sequence, connection, reply)
    sequence = 0
    control = sys.stdin.buffer.raw  # type: ignore[attr-defined]
    selector.register(control, selectors.EVENT_READ, ("control", None))
    print(json.dumps([listener.getsockname()[1] for listener in listeners]), flush=True)
    pending = b""

    def close(conn: socket.socket) -> None:
        conns.pop(conn, None)
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(conn)
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_RDWR)
        conn.close()

    while True:
        timeout = None if not due else max(0.0, due[0][0] - time.monotonic())
        for key, _ in selector.select(timeout):
            kind, i = key.data
            if kind == "accept":
                conn, _ = key.fileobj.accept()
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conns[conn] = {"master": i, "buffer": bytearray(), "last": 0.0}
                selector.register(conn, selectors.EVENT_READ, ("read", i))
            elif kind == "control":
                data = os.read(control.fileno(), 65536)
                if not data:
                    for conn in list(conns):
                        close(conn)
                    return
                pending += data
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    request = json.loads(line)
                    if request["op"] == "set":
                        plans[request["i"]].update(request["plan"])
                    else:
                        for conn, state in list(conns.items()):
                            if state["master"] == request["i"]:
                                close(conn)
                    print("true", flush=True)
            else:
                conn = key.fileobj
                state = conns[conn]
                plan = plans[i]
                try:
                    data = conn.recv(1 << 20)
                except OSError:
                    data = b""
                if not data:
                    close(conn)
                    continue
                if plan.get("flush_only"):
                    conn.sendall(b":0\r\n" if plan.get("taken") else b":1\r\n")
                    selector.unregister(conn)  # reads nothing more
                    continue
                state["buffer"] += data
                while True:
                    name, used = _command_name(state["buffer"])
                    if name is None:
                        break
                    del state["buffer"][:used]
                    delay = plan.get("delay", 0.0)
                    if delay is None:
                        continue
                    when = max(time.monotonic() + delay, state["last"])  # in order
                    state["last"] = when
                    sequence += 1
                    heapq.heappush(due, (when, sequence, conn, _timed_answer(plan, name)))
        now = time.monotonic()
        while due and due[0][0] <= now:
            _, _, conn, reply = heapq.heappop(due)
            if conn in conns:
                with contextlib.suppress(OSError):
                    conn.sendall(reply)


if __name__ == "__main__":
    _serve_timed(json.loads(sys.argv[1]))
