"""Masters with fault methods: N redis-servers (support/servers.py), each behind a proxy listener.

    masters = FaultyMasters(5)             # free ports; --enable-debug-command local
    masters.urls("direct")                 # the servers themselves (process faults)
    masters.urls("proxy")                  # through the fault proxy (network faults)
    masters.kill(0); masters.restart(0, delay=1.2)
    masters.stop(1); masters.cont(1)       # SIGSTOP / SIGCONT
    masters.debug_sleep(2, 0.3)            # DEBUG SLEEP on a raw socket, returns at once
    masters.client_pause(3, 300)           # CLIENT PAUSE 300 WRITE (liftable: unpause())
    masters.script_flush(4)
    masters.proxy.set_mode([0, 1], "latency", ms=200)
    masters.heal()                         # everything back: running, unpaused, proxies pass
    masters.cleanup()                      # every process killed by its pid

Every fault is logged with the monotonic time (`schedule`), for the dumps of failed scenarios.
`Fault` objects (FAULTS below) apply one kind of fault to a set of masters and heal it; the
transient ones (DEBUG SLEEP, CLIENT PAUSE) are re-applied by a thread for as long as they last.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import random
import socket
import threading
import time
from dataclasses import dataclass, field

from servers import PortTaken, RedisServer

from .proxy import FaultProxy

AOF_ARGS = ("--appendonly", "yes", "--appendfsync", "always")


def _resp(*args) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class RawConn:
    """A raw connection to a master for fault commands (DEBUG SLEEP): counts the replies it is
    owed (simple one-line replies only), so that a heal can wait for every one of them."""

    def __init__(self, address) -> None:
        self.sock = _connect(address)
        self.owed = 0
        self._buf = b""

    def send(self, *args) -> None:
        self.sock.sendall(_resp(*args))
        self.owed += 1

    def read_one(self, timeout: float) -> bytes:
        self.sock.settimeout(timeout)
        while b"\r\n" not in self._buf:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("closed")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\r\n", 1)
        self.owed -= 1
        return line

    def drain(self, timeout: float = 30) -> None:
        with contextlib.suppress(OSError):
            while self.owed > 0:
                self.read_one(timeout)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


class FaultyMasters:
    def __init__(
        self,
        n: int = 5,
        *,
        aof: bool = False,
        extra_args: tuple[str, ...] = (),
        servers: list[RedisServer] | None = None,
    ):
        """n new servers, or the `servers` given (started elsewhere: their cleanup is this
        object's from now on)."""
        self.aof = aof
        self.extra_args = tuple(extra_args) + (AOF_ARGS if aof else ())
        self.servers: list[RedisServer] = []
        self.proxy: FaultProxy | None = None
        self.schedule: list[tuple[float, str]] = []
        self._t0 = time.monotonic()
        self._raw: list[tuple[int, RawConn]] = []
        self._keepers: dict[tuple[str, int], _Keeper] = {}
        self._restart_timers: list[concurrent.futures.Future] = []
        self._mutex = threading.Lock()
        # Servers are (re)started only from these long-lived threads: PR_SET_PDEATHSIG (see
        # servers.py) kills a child when the *thread* that spawned it exits.
        n = n if servers is None else len(servers)
        self._spawners = concurrent.futures.ThreadPoolExecutor(n, thread_name_prefix="spawner")
        try:
            if servers is not None:
                self.servers = list(servers)
            for _ in range(n - len(self.servers)):
                self.servers.append(RedisServer(extra_args=self.extra_args))
            self.proxy = FaultProxy([("127.0.0.1", s.port) for s in self.servers])
        except BaseException:
            self.cleanup()
            raise

    # -- addresses --------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.servers)

    def urls(self, via: str = "direct", idx=None) -> list[str]:
        idx = range(len(self.servers)) if idx is None else idx
        if via == "proxy":
            return [self.proxy.url(i) for i in idx]
        return [self.servers[i].url for i in idx]

    def admin(self, i: int):
        return self.servers[i].admin()

    def log(self, what: str) -> None:
        with self._mutex:
            self.schedule.append((round(time.monotonic() - self._t0, 4), what))

    # -- process faults ---------------------------------------------------------------------
    def kill(self, i: int) -> None:
        self.log(f"kill m{i} (pid {self.servers[i].pid})")
        self.servers[i].kill()

    def restart(self, i: int, delay: float = 0.0, background: bool = False) -> None:
        """Starts master i again on its port (empty, unless AOF), `delay` seconds from now;
        in the background (this returns at once; heal() waits for it) or not."""
        fut = self._spawners.submit(self._restart, i, delay)
        if background:
            self._restart_timers.append(fut)
        else:
            fut.result()

    def restart_many(self, idx, delay: float = 0.0) -> None:
        """Restarts several masters at once (in parallel) and waits for all of them."""
        for fut in [self._spawners.submit(self._restart, i, delay) for i in idx]:
            fut.result()

    def _restart(self, i: int, delay: float) -> None:
        if delay:
            time.sleep(delay)
        srv = self.servers[i]
        srv._admin_password = None
        try:
            srv.restart()
        except PortTaken:
            # Another session took the port meanwhile: a new server elsewhere, the proxy follows
            # (direct URLs handed out earlier then point at nothing: a dead master for good).
            srv.cleanup()
            srv = self.servers[i] = RedisServer(extra_args=self.extra_args)
            self.proxy.set_upstream(i, "127.0.0.1", srv.port)
            self.log(f"m{i} moved to port {srv.port}")
        self.log(f"restart m{i} (pid {srv.pid}, aof={self.aof})")

    def stop(self, i: int) -> None:
        self.log(f"SIGSTOP m{i}")
        self.servers[i].stop()

    def cont(self, i: int) -> None:
        self.log(f"SIGCONT m{i}")
        self.servers[i].cont()

    # -- command faults ---------------------------------------------------------------------
    def raw_address(self, i: int):
        return ("127.0.0.1", self.servers[i].port)

    def raw(self, i: int) -> RawConn:
        """A raw connection to master i, drained and closed at heal."""
        conn = RawConn(self.raw_address(i))
        conn.send("PING")
        conn.read_one(10)  # accepted and registered by the server: it is served in order now
        with self._mutex:
            self._raw.append((i, conn))
        return conn

    def debug_sleep(self, i: int, seconds: float, conn: RawConn | None = None) -> RawConn:
        """Sends DEBUG SLEEP (on `conn`, else a new raw connection) and returns at once."""
        self.log(f"DEBUG SLEEP {seconds:g} m{i}")
        conn = conn or self.raw(i)
        conn.send("DEBUG", "SLEEP", f"{seconds:g}")
        return conn

    def drain_raw(self, i: int | None = None) -> None:
        """Waits for the owed replies of the raw connections (of master i), then closes them."""
        with self._mutex:
            mine = [(j, c) for j, c in self._raw if i is None or j == i]
            self._raw = [(j, c) for j, c in self._raw if not (i is None or j == i)]
        for _j, c in mine:
            c.drain()
            c.close()

    def client_pause(self, i: int, ms: int) -> None:
        self.log(f"CLIENT PAUSE {ms} WRITE m{i}")
        self.admin(i).execute_command("CLIENT", "PAUSE", int(ms), "WRITE")

    def unpause(self, i: int) -> None:
        self.log(f"CLIENT UNPAUSE m{i}")
        self.admin(i).execute_command("CLIENT", "UNPAUSE")

    def script_flush(self, i: int) -> None:
        self.log(f"SCRIPT FLUSH m{i}")
        self.admin(i).script_flush()

    # -- transient faults kept up by a thread --------------------------------------------------
    def keep(self, kind: str, i: int, apply, period: float) -> None:
        """Re-applies a transient fault on master i every `period` seconds until heal().

        apply(ready) applies it once; it calls ready() (or returns) once the fault is in effect.
        This returns only when the first application is in effect: no command sent after it
        escapes the fault."""
        key = (kind, i)
        if key in self._keepers:
            return
        k = _Keeper(apply, period)
        self._keepers[key] = k
        k.start()
        if not k.ready.wait(10):
            raise RuntimeError(f"{kind} on m{i} did not take effect: {k.errors}")

    def wait_blocked(self, i: int, timeout: float = 5.0) -> None:
        """Returns once master i provably does not answer (a PING on a new connection gets no
        reply within 20 ms): a DEBUG SLEEP sent to it is running."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with _connect(self.raw_address(i)) as s:
                s.sendall(b"*1\r\n$4\r\nPING\r\n")
                s.settimeout(0.02)
                try:
                    s.recv(64)
                except (TimeoutError, socket.timeout):
                    return
            time.sleep(0.001)
        raise RuntimeError(f"m{i} still answers: the DEBUG SLEEP did not start")

    def _stop_keepers(self) -> None:
        keepers, self._keepers = self._keepers, {}
        for k in keepers.values():
            k.stop()

    # -- heal -------------------------------------------------------------------------------
    def heal(self) -> None:
        """Every master running, unpaused, awake and reachable through its proxy; the buffered
        commands of stopped or sleeping masters have been processed when this returns."""
        self._stop_keepers()
        for fut in self._restart_timers:
            fut.result(60)
        self._restart_timers.clear()
        if self.proxy is not None:
            self.proxy.heal()
        for i, srv in enumerate(self.servers):
            if srv.alive and srv.stopped:
                self.cont(i)
        dead = [i for i, srv in enumerate(self.servers) if not srv.alive]
        if dead:
            self.restart_many(dead)
        self.drain_raw()  # DEBUG SLEEPs over
        for srv in self.servers:
            a = srv.admin()
            a.execute_command("CLIENT", "UNPAUSE")
            a.ping()
            a.ping()  # see RedisServer.cont(): buffered commands were processed before this
        self.log("healed")

    def reset(self) -> None:
        """Healed, flushed, no cached script, default configuration, empty schedule."""
        self.heal()
        for srv in self.servers:
            a = srv.admin()
            a.flushall()
            a.script_flush()
            a.config_set("requirepass", "")
        with self._mutex:
            self.schedule = []
            self._t0 = time.monotonic()

    def cleanup(self) -> None:
        """Kills every process (servers, proxy) by its pid; idempotent."""
        self._stop_keepers()
        for _i, c in self._raw:
            c.close()
        self._raw.clear()
        if self.proxy is not None:
            self.proxy.close()
        for srv in self.servers:
            srv.cleanup()

    # -- inspection -------------------------------------------------------------------------
    def lib_connections(self) -> list[int]:
        """Connections per master that are not our admin connection (the library's, the
        proxy's upstream ones, DEBUG SLEEP sockets)."""
        return [len(srv.foreign_clients()) for srv in self.servers if srv.alive]


def _connect(address) -> socket.socket:
    """A connection to a (host, port) address or a unix socket path."""
    if isinstance(address, str):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(1)
        s.connect(address)
        return s
    return socket.create_connection(address, timeout=1)


class _Keeper(threading.Thread):
    def __init__(self, apply, period: float) -> None:
        super().__init__(daemon=True)
        self.apply = apply
        self.period = period
        self.stopping = threading.Event()
        self.ready = threading.Event()
        self.errors: list[str] = []

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                self.apply(self.ready.set)
                self.ready.set()
            except Exception as exc:  # a master restarted meanwhile: try again next period
                self.errors.append(repr(exc))
            self.stopping.wait(self.period)

    def stop(self) -> None:
        self.stopping.set()
        self.join(10)


# -- fault kinds ---------------------------------------------------------------------------------


@dataclass
class Fault:
    """One kind of fault, applied to a set of masters and healed.

    via: the URLs the clients must use for the fault to be seen ("direct" for process faults,
    "proxy" for network faults); the others work either way.
    """

    kind: str
    params: dict = field(default_factory=dict)

    @property
    def via(self) -> str:
        return "proxy" if self.kind in PROXY_KINDS else "direct"

    def __str__(self) -> str:
        if not self.params:
            return self.kind
        return self.kind + "(" + ",".join(f"{k}={v}" for k, v in self.params.items()) + ")"

    def apply(self, masters: FaultyMasters, idx) -> None:
        p = self.params
        for i in idx:
            if self.kind == "kill":
                masters.kill(i)
            elif self.kind == "sigstop":
                masters.stop(i)
            elif self.kind == "debug_sleep" and p.get("once"):
                masters.debug_sleep(i, p.get("seconds", 0.3))
            elif self.kind == "client_pause" and p.get("once"):
                masters.client_pause(i, p.get("ms", 300))
            elif self.kind == "script_flush" and p.get("once"):
                masters.script_flush(i)
            elif self.kind == "debug_sleep":
                secs = p.get("seconds", 0.3)
                if p.get("continuous"):
                    self._keep_asleep(masters, i, secs)
                else:
                    self._keep_sleeping(masters, i, secs, p.get("gap", 0.03))
            elif self.kind == "client_pause":
                ms = p.get("ms", 300)
                # continuous: re-issued at half the pause (each one extends the pause); else a
                # gap of 20 ms between pauses, in which the master answers.
                period = ms / 2000.0 if p.get("continuous") else ms / 1000.0 + 0.02
                masters.keep(
                    "pause", i, lambda _ready, i=i, ms=ms: masters.client_pause(i, ms), period
                )
            elif self.kind == "script_flush":
                masters.keep(
                    "flush", i, lambda _ready, i=i: masters.script_flush(i), p.get("every", 0.05)
                )
            elif self.kind in PROXY_KINDS:
                masters.log(f"proxy m{i} -> {self}")
        if self.kind in PROXY_KINDS:
            masters.proxy.set_mode(
                list(idx),
                PROXY_KINDS[self.kind],
                ms=p.get("ms", 0),
                direction=p.get("direction", "both"),
            )

    @staticmethod
    def _keep_sleeping(masters: FaultyMasters, i: int, secs: float, gap: float) -> None:
        """DEBUG SLEEP secs, then `gap` awake, again and again: a stuttering master."""
        conn = masters.raw(i)

        def once(ready):
            masters.debug_sleep(i, secs, conn)
            masters.wait_blocked(i)
            ready()
            conn.read_one(secs + 10)  # +OK: the sleep is over
            time.sleep(gap)

        masters.keep("sleep", i, once, 0.0)

    @staticmethod
    def _keep_asleep(masters: FaultyMasters, i: int, secs: float) -> None:
        """DEBUG SLEEP secs back to back, with no moment awake: each next sleep is sent, on the
        other of two connections (both accepted beforehand), half-way through the current one.
        When the current one ends the server serves its ready connections in the order they
        became ready (epoll), so the next sleep runs before any command sent after it: every
        command waits at least secs/2."""
        conns = [masters.raw(i), masters.raw(i)]
        state = {"k": 0, "t_next": time.monotonic()}

        def once(ready):
            k = state["k"]
            conn = conns[k % 2]
            if conn.owed:
                conn.read_one(secs * 2 + 10)  # its sleep ended half a period ago
            masters.debug_sleep(i, secs, conn)
            if k == 0:
                masters.wait_blocked(i)
                ready()
            state["k"] = k + 1
            state["t_next"] += secs / 2 if k == 0 else secs
            time.sleep(max(0.0, state["t_next"] - time.monotonic()))

        masters.keep("sleep", i, once, 0.0)

    def heal(self, masters: FaultyMasters, idx) -> None:
        """Heals this fault only (masters.heal() heals everything)."""
        if self.kind == "kill":
            for i in idx:
                masters.restart(i, delay=self.params.get("restart_delay", 0.0))
        elif self.params.get("once"):
            for i in idx:
                if self.kind == "debug_sleep":
                    masters.drain_raw(i)
                elif self.kind == "client_pause":
                    masters.unpause(i)
        elif self.kind == "sigstop":
            for i in idx:
                masters.cont(i)
        elif self.kind in ("debug_sleep", "client_pause", "script_flush"):
            name = {"debug_sleep": "sleep", "client_pause": "pause", "script_flush": "flush"}
            for i in idx:
                k = masters._keepers.pop((name[self.kind], i), None)
                if k is not None:
                    k.stop()
                if self.kind == "debug_sleep":
                    masters.drain_raw(i)
                if self.kind == "client_pause":
                    masters.unpause(i)
        elif self.kind in PROXY_KINDS:
            masters.proxy.set_mode(list(idx), "pass")
            for i in idx:
                masters.log(f"proxy m{i} -> pass")


PROXY_KINDS = {
    "latency": "latency",
    "blackhole": "blackhole",
    "reset": "reset",
    "drop_replies": "drop_replies",
    "half_reply": "half_reply",
}


def tier1_faults(continuous: bool) -> list[Fault]:
    """The kinds of the acceptance (tier 1), with their standard parameters.

    The transient faults (DEBUG SLEEP 0.3, CLIENT PAUSE 300 WRITE) are kept up for the whole
    scenario: stuttering (a short moment awake between two) when `continuous` is False, which
    suits a faulted minority; with no moment awake when True, which a faulted majority needs
    (else an attempt that falls in the moment awake may rightly succeed)."""
    extra = {"continuous": True} if continuous else {}
    return [
        Fault("kill"),
        Fault("sigstop"),
        Fault("debug_sleep", {"seconds": 0.3, **extra}),
        Fault("client_pause", {"ms": 300, **extra}),
        Fault("latency", {"ms": 200}),
        Fault("blackhole"),
        Fault("reset"),
        Fault("drop_replies"),
    ]


TIER1_FAULTS = tier1_faults(continuous=False)


def random_fault(rng: random.Random, ttl: float, drift: float) -> tuple[Fault, float]:
    """A fault for the soak nemesis, with randomised parameters, and how long it lasts before
    it is healed (a killed master is restarted after ttl + drift: the README's rule)."""
    kind = rng.choice(
        [
            "kill",
            "sigstop",
            "debug_sleep",
            "client_pause",
            "latency",
            "blackhole",
            "reset",
            "drop_replies",
            "half_reply",
            "script_flush",
        ]
    )
    if kind == "kill":
        return Fault(kind), round(ttl + drift + 0.05, 3)
    if kind == "sigstop":
        return Fault(kind), round(rng.uniform(0.1, 3.0), 3)
    if kind == "debug_sleep":
        secs = round(rng.uniform(0.05, 0.5), 3)
        return Fault(kind, {"seconds": secs, "once": True}), secs
    if kind == "client_pause":
        ms = rng.choice([100, 300, 600])
        return Fault(kind, {"ms": ms, "once": True}), ms / 1000.0
    if kind == "script_flush":
        return Fault(kind, {"once": True}), 0.0
    if kind == "latency":
        return Fault(kind, {"ms": rng.choice([5, 30, 100, 300])}), round(rng.uniform(0.3, 2.0), 3)
    return Fault(kind), round(rng.uniform(0.3, 2.0), 3)
