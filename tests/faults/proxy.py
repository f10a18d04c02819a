"""A fault-injecting TCP proxy of our own: one loopback listener per master, in a child process.

Run as a script, it is the proxy: an asyncio loop that forwards bytes between each client
connection and its master, and obeys one-line JSON commands on stdin (answering each with one JSON
line on stdout).  `FaultProxy` (imported) starts and drives that process.  A separate process keeps
the proxy's CPU and GIL away from the client under test and from the timing it measures.

Modes, per listener (all connections through it, present and future):

    pass          forward as is
    latency       delay every chunk by `ms` in each direction given by `direction`
                  ("both": the round trip grows by 2 x ms; "up": requests only; "down": replies
                  only); the order of the bytes is kept
    blackhole     nothing gets through in either direction; new connections are accepted (the
                  kernel completes the handshake) and never answered
    reset         every connection is reset (RST, SO_LINGER 0), new ones as soon as accepted
    drop_replies  requests reach the master, its replies are thrown away
    half_reply    the first reply chunk after the switch arrives cut in half, nothing after it

Stream integrity: TCP never loses bytes inside a connection and then goes on; it delivers them or
the connection dies.  So a connection that lost bytes (blackhole, drop_replies, half_reply) is
"tainted" and is reset when its listener goes back to pass: the client sees what a dead link
looks like, never a stream with a hole in it.  Delayed bytes (latency) are delivered at once when
the listener goes back to pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import deque

MODES = ("pass", "latency", "blackhole", "reset", "drop_replies", "half_reply")
_LOSSY = ("blackhole", "drop_replies", "half_reply")


def _rst(transport) -> None:
    """Closes a transport with a TCP RST (SO_LINGER 0) instead of a FIN."""
    if transport is None or transport.is_closing():
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


# -- the proxy process ------------------------------------------------------------------------


class _Side(asyncio.Protocol):
    def __init__(self, link: _Link, upstream: bool) -> None:
        self.link = link
        self.upstream = upstream

    def connection_made(self, transport) -> None:
        if self.upstream:
            self.link.upstream_made(transport)
        else:
            self.link.client_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.upstream:
            self.link.from_server(data)
        else:
            self.link.from_client(data)

    def connection_lost(self, exc) -> None:
        self.link.side_lost(self.upstream, exc)


class _Link:
    """One client connection and its upstream connection to the master."""

    def __init__(self, listener: _Listener) -> None:
        self.listener = listener
        self.loop = listener.loop
        self.client = None
        self.upstream = None
        self.pending_up: list[bytes] = []  # written once the upstream connection is made
        self.queues = {True: deque(), False: deque()}  # up?, (due, data)
        self.timers: dict[bool, asyncio.TimerHandle | None] = {True: None, False: None}
        self.tainted = False
        self.half_done = False
        self.closed = False

    # -- connection events
    def client_made(self, transport) -> None:
        self.client = transport
        mode = self.listener.mode
        self.listener.accepted += 1
        self.listener.links.add(self)
        if mode == "reset":
            self.listener.resets += 1
            self.close(rst=True)
            return
        if mode == "blackhole":
            self.tainted = True  # never connected upstream: reset when the blackhole ends
            return
        self.connect_upstream()

    def connect_upstream(self) -> None:
        host, port = self.listener.upstream

        async def go():
            try:
                await self.loop.create_connection(lambda: _Side(self, True), host, port)
            except OSError:
                self.listener.upstream_failures += 1
                self.close(rst=True)  # the master is down: the client sees a reset

        self.loop.create_task(go())

    def upstream_made(self, transport) -> None:
        if self.closed:
            transport.abort()
            return
        self.upstream = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for data in self.pending_up:
            transport.write(data)
        self.pending_up.clear()

    def side_lost(self, upstream: bool, exc) -> None:
        if self.closed:
            return
        # The master went away (killed): the client is reset, as a dead host's peer would be;
        # a client that left closes the upstream connection normally.
        self.close(rst=upstream and exc is not None, fin_only=not upstream)

    # -- data
    def from_client(self, data: bytes) -> None:
        mode = self.listener.mode
        if mode == "blackhole":
            self.tainted = True
            return
        if mode == "latency" and self.listener.direction in ("both", "up"):
            self.enqueue(True, data, self.listener.delay_s)
        elif self.queues[True]:
            self.enqueue(True, data, 0.0)
        else:
            self.send(True, data)

    def from_server(self, data: bytes) -> None:
        mode = self.listener.mode
        if mode in ("blackhole", "drop_replies"):
            self.tainted = True
            return
        if mode == "half_reply":
            self.tainted = True
            if not self.half_done:
                self.half_done = True
                cut = max(1, len(data) // 2) if len(data) > 1 else 0
                if cut:
                    self.send(False, data[:cut])
            return
        if mode == "latency" and self.listener.direction in ("both", "down"):
            self.enqueue(False, data, self.listener.delay_s)
        elif self.queues[False]:
            self.enqueue(False, data, 0.0)
        else:
            self.send(False, data)

    def send(self, up: bool, data: bytes) -> None:
        if self.closed:
            return
        if up:
            if self.upstream is None:
                self.pending_up.append(data)
            else:
                self.upstream.write(data)
        elif self.client is not None:
            self.client.write(data)

    def enqueue(self, up: bool, data: bytes, delay: float) -> None:
        q = self.queues[up]
        due = self.loop.time() + delay
        if q and q[-1][0] > due:
            due = q[-1][0]  # never overtake earlier bytes
        q.append((due, data))
        if self.timers[up] is None:
            self.timers[up] = self.loop.call_at(q[0][0], self.flush, up)

    def flush(self, up: bool, everything: bool = False) -> None:
        self.timers[up] = None
        q = self.queues[up]
        now = self.loop.time()
        while q and (everything or q[0][0] <= now):
            self.send(up, q.popleft()[1])
        if q:
            self.timers[up] = self.loop.call_at(q[0][0], self.flush, up)

    def heal(self) -> None:
        """The listener went back to pass: deliver what was delayed, reset what lost bytes."""
        if self.tainted:
            self.listener.resets += 1
            self.close(rst=True)
            return
        for up in (True, False):
            if self.timers[up] is not None:
                self.timers[up].cancel()
            self.flush(up, everything=True)

    def close(self, rst: bool, fin_only: bool = False) -> None:
        if self.closed:
            return
        self.closed = True
        for up in (True, False):
            if self.timers[up] is not None:
                self.timers[up].cancel()
                self.timers[up] = None
            self.queues[up].clear()
        if rst:
            _rst(self.client)
        elif self.client is not None:
            self.client.close()
        if self.upstream is not None:
            if fin_only:
                self.upstream.close()
            else:
                _rst(self.upstream)
        self.listener.links.discard(self)


class _Listener:
    def __init__(self, loop, index: int, upstream: tuple[str, int]) -> None:
        self.loop = loop
        self.index = index
        self.upstream = upstream
        self.mode = "pass"
        self.delay_s = 0.0
        self.direction = "both"
        self.links: set[_Link] = set()
        self.accepted = 0
        self.resets = 0
        self.upstream_failures = 0
        self.server = None
        self.port = 0

    async def start(self) -> None:
        self.server = await self.loop.create_server(
            lambda: _Side(_Link(self), False), "127.0.0.1", 0, backlog=128
        )
        self.port = self.server.sockets[0].getsockname()[1]

    def set_mode(self, mode: str, ms: float = 0.0, direction: str = "both") -> None:
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}")
        old = self.mode
        self.mode = mode
        self.delay_s = ms / 1000.0
        self.direction = direction
        if mode == "reset":
            for link in list(self.links):
                self.resets += 1
                link.close(rst=True)
        elif mode == "half_reply":
            for link in self.links:
                link.half_done = False
        if mode == "pass" and old != "pass":
            for link in list(self.links):
                link.heal()
        elif old == "latency" and mode != "latency":
            for link in list(self.links):
                if not link.tainted:
                    link.heal()

    def stats(self) -> dict:
        return {
            "port": self.port,
            "mode": self.mode,
            "active": len(self.links),
            "accepted": self.accepted,
            "resets": self.resets,
            "upstream_failures": self.upstream_failures,
        }


async def _serve(upstreams: list[tuple[str, int]]) -> None:
    loop = asyncio.get_running_loop()
    listeners = [_Listener(loop, i, up) for i, up in enumerate(upstreams)]
    for listener in listeners:
        await listener.start()
    out = sys.stdout

    def reply(obj) -> None:
        out.write(json.dumps(obj) + "\n")
        out.flush()

    reply({"ports": [listener.port for listener in listeners]})
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = await reader.readline()
        if not line:
            return  # the controller went away
        try:
            cmd = json.loads(line)
            op = cmd["op"]
            if op == "mode":
                for i in cmd["idx"]:
                    listeners[i].set_mode(
                        cmd["mode"], float(cmd.get("ms", 0)), cmd.get("direction", "both")
                    )
                reply({"ok": True})
            elif op == "upstream":
                listeners[cmd["idx"]].upstream = (cmd["host"], int(cmd["port"]))
                reply({"ok": True})
            elif op == "stats":
                reply({"ok": True, "stats": [listener.stats() for listener in listeners]})
            elif op == "exit":
                reply({"ok": True})
                return
            else:
                reply({"ok": False, "error": f"unknown op {op!r}"})
        except Exception as exc:  # a bad command must not kill the proxy
            reply({"ok": False, "error": repr(exc)})


def _main() -> int:
    upstreams = [(h, int(p)) for h, p in (a.rsplit(":", 1) for a in sys.argv[1:])]
    asyncio.run(_serve(upstreams))
    return 0


# -- the controller (in the test process) -----------------------------------------------------


def _pdeathsig() -> None:
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


class ProxyError(RuntimeError):
    pass


class FaultProxy:
    """Starts the proxy process for `upstreams` [(host, port)], one listener each."""

    def __init__(self, upstreams: list[tuple[str, int]]) -> None:
        self._mutex = threading.Lock()
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__)] + [f"{h}:{p}" for h, p in upstreams],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            preexec_fn=_pdeathsig,
        )
        first = self._read(timeout=20)
        self.ports: list[int] = first["ports"]
        self.modes = ["pass"] * len(self.ports)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def url(self, i: int) -> str:
        return f"redis://127.0.0.1:{self.ports[i]}/0"

    def _read(self, timeout: float) -> dict:
        import select

        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ProxyError("the proxy did not answer")
            r, _, _ = select.select([fd], [], [], left)
            if r:
                line = self.proc.stdout.readline()
                if not line:
                    err = self.proc.stderr.read().decode(errors="replace")[-2000:]
                    raise ProxyError(f"the proxy exited: {err}")
                return json.loads(line)

    def command(self, **cmd) -> dict:
        with self._mutex:
            self.proc.stdin.write((json.dumps(cmd) + "\n").encode())
            self.proc.stdin.flush()
            answer = self._read(timeout=20)
        if not answer.get("ok"):
            raise ProxyError(f"{cmd}: {answer}")
        return answer

    def set_mode(self, idx, mode: str, ms: float = 0, direction: str = "both") -> None:
        idx = [idx] if isinstance(idx, int) else list(idx)
        self.command(op="mode", idx=idx, mode=mode, ms=ms, direction=direction)
        for i in idx:
            self.modes[i] = mode

    def set_upstream(self, i: int, host: str, port: int) -> None:
        self.command(op="upstream", idx=i, host=host, port=port)

    def stats(self) -> list[dict]:
        return self.command(op="stats")["stats"]

    def heal(self) -> None:
        self.set_mode(range(len(self.ports)), "pass")

    def close(self) -> None:
        """Kills the proxy process by pid (idempotent)."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            with contextlib.suppress(Exception):
                f.close()


if __name__ == "__main__":
    sys.exit(_main())
