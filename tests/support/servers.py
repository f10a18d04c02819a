"""Real redis-server processes for the hiredlock test suite (no mocks).

Every server binds 127.0.0.1 on a port chosen by the kernel (bind to port 0, close, hand the
number to redis-server) and also listens on a unix socket in its own temporary directory.  A server
made with `tls=ServerTls(...)` listens for TLS on a second such port too (its plaintext port stays,
for the admin client and the readiness check); `bind=` adds addresses (e.g. "::1").  Other
sessions run redis-servers on this machine, so a port can be taken between the probe and the
start: the start is retried on a fresh port, and a server only counts as started once the process
answering PING on that port reports *our* pid (INFO server: process_id).

Teardown never looks processes up by name: it signals the pid we spawned.  As a safety net for a
pytest that is itself killed, each server gets PR_SET_PDEATHSIG=SIGKILL, and an atexit hook kills
whatever is still registered.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.parse

import redis


def find_server(environ) -> tuple[str, str | None]:
    """(the server binary the fixtures run, the cli beside it or None): HIREDLOCK_TEST_REDIS_SERVER
    when set, else redis-server on PATH, else valkey-server on PATH. The cli is the server's
    sibling (valkey-cli beside valkey-server) in its folder, else the same kind on PATH, else
    the other kind (either cli speaks to either server)."""
    server = (
        environ.get("HIREDLOCK_TEST_REDIS_SERVER")
        or shutil.which("redis-server")
        or shutil.which("valkey-server")
        or "/usr/bin/redis-server"
    )
    kind = "valkey" if os.path.basename(server).startswith("valkey") else "redis"
    beside = os.path.join(os.path.dirname(server), f"{kind}-cli")
    if os.access(beside, os.X_OK):
        return server, beside
    other = "redis" if kind == "valkey" else "valkey"
    return server, shutil.which(f"{kind}-cli") or shutil.which(f"{other}-cli")


REDIS_SERVER, REDIS_CLI = find_server(os.environ)
ADMIN_NAME = "hiredlock-tests-admin"

_LIVE: dict[int, RedisServer] = {}
_OWNER_PID = os.getpid()  # a forked child (test_tokens.py) never cleans up the parent's servers


class RedisServerMissing(RuntimeError):
    pass


class PortTaken(RuntimeError):
    pass


def require_redis_server() -> str:
    if not (os.path.isfile(REDIS_SERVER) and os.access(REDIS_SERVER, os.X_OK)):
        raise RedisServerMissing(
            f"redis-server not found (looked at {REDIS_SERVER!r}); "
            "install it or set HIREDLOCK_TEST_REDIS_SERVER"
        )
    return REDIS_SERVER


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ipv6_loopback() -> str | None:
    """None if this machine can bind ::1, else why it cannot."""
    if not socket.has_ipv6:
        return "Python was built without IPv6 support"
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError as exc:
        return f"no IPv6 loopback on this machine (binding ::1: {exc})"
    return None


@dataclasses.dataclass(frozen=True)
class ServerTls:
    """A redis-server's TLS settings: its certificate chain and key, the CA file it trusts for
    client certificates (in the tests, the CA that signed the servers' certificates too),
    --tls-auth-clients (no | yes | optional) and, if set, --tls-protocols (e.g. "TLSv1.2")."""

    cert_file: str
    key_file: str
    ca_file: str
    auth_clients: str = "no"
    protocols: str | None = None

    def args(self, tls_port: int) -> list[str]:
        args = [
            "--tls-port",
            str(tls_port),
            "--tls-cert-file",
            self.cert_file,
            "--tls-key-file",
            self.key_file,
            "--tls-ca-cert-file",
            self.ca_file,
            "--tls-auth-clients",
            self.auth_clients,
        ]
        if self.protocols is not None:
            args += ["--tls-protocols", self.protocols]
        return args


def _pdeathsig():
    # Runs in the child between fork and exec: die with the parent (pytest) if it is killed.
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _proc_state(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    # pid (comm) state ...  -- comm may contain spaces/parentheses: split after the last ')'.
    return data[data.rindex(")") + 2]


class RedisServer:
    """One redis-server child process on 127.0.0.1:<port> plus a unix socket (and, with `tls`,
    a TLS port on the same addresses).  `bind`: the addresses listened on."""

    def __init__(
        self,
        port: int | None = None,
        *,
        extra_args: tuple[str, ...] = (),
        tls: ServerTls | None = None,
        bind: tuple[str, ...] = ("127.0.0.1",),
    ):
        require_redis_server()
        self.dir = tempfile.mkdtemp(prefix="hlredis-")
        self.extra_args = tuple(extra_args)
        self.tls = tls
        self.bind = tuple(bind)
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.tls_port: int | None = None
        self.stopped = False
        self._admin: redis.Redis | None = None
        self._admin_password: str | None = None
        self._clients: list[redis.Redis] = []
        try:
            if port is not None:
                self._start_on(port, attempts=1)
            else:
                self._start_anywhere()
        except BaseException:
            self.cleanup()
            raise

    # -- addresses -------------------------------------------------------------------------
    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def tls_url(self) -> str:
        """rediss:// URL of the TLS port, trusting the CA of the server's `tls` settings."""
        assert self.tls is not None and self.tls_port is not None, "not a TLS server"
        ca = urllib.parse.quote(self.tls.ca_file, safe="/")
        return f"rediss://127.0.0.1:{self.tls_port}/0?ssl_ca_certs={ca}"

    @property
    def unixsocket(self) -> str:
        return os.path.join(self.dir, "redis.sock")

    @property
    def unix_url(self) -> str:
        return f"unix://{self.unixsocket}?db=0"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def logfile(self) -> str:
        return os.path.join(self.dir, "redis.log")

    def __repr__(self) -> str:
        tls = f" tls_port={self.tls_port}" if self.tls is not None else ""
        return (
            f"<RedisServer port={self.port}{tls} pid={self.pid} "
            f"alive={self.alive} stopped={self.stopped}>"
        )

    # -- lifecycle -------------------------------------------------------------------------
    def _args(self, port: int, tls_port: int | None) -> list[str]:
        tls = self.tls.args(tls_port) if self.tls is not None else []
        return [
            REDIS_SERVER,
            "--port",
            str(port),
            # redis-server 7 takes every word up to the next --option as the option's arguments
            "--bind",
            *self.bind,
            *tls,
            "--save",
            "",
            "--appendonly",
            "no",
            "--enable-debug-command",
            "local",
            "--dir",
            self.dir,
            "--daemonize",
            "no",
            "--logfile",
            self.logfile,
            "--unixsocket",
            self.unixsocket,
            "--unixsocketperm",
            "700",
            *self.extra_args,
        ]

    def _start_anywhere(self) -> None:
        last = None
        for _ in range(20):
            port = free_port()
            tls_port = None
            while self.tls is not None and tls_port in (None, port):
                tls_port = free_port()
            try:
                self._start_on(port, attempts=1, tls_port=tls_port)
                return
            except PortTaken as exc:
                last = exc
        raise RuntimeError(f"could not start redis-server on a free port: {last}")

    def _start_on(self, port: int, attempts: int, tls_port: int | None = None) -> None:
        last = None
        for i in range(attempts):
            if i:
                time.sleep(0.05)
            try:
                self._spawn_and_wait(port, tls_port)
                return
            except PortTaken as exc:
                last = exc
        raise last  # type: ignore[misc]

    def _spawn_and_wait(self, port: int, tls_port: int | None = None) -> None:
        if os.path.exists(self.unixsocket):
            os.unlink(self.unixsocket)
        proc = subprocess.Popen(
            self._args(port, tls_port),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_pdeathsig,
        )
        _LIVE[proc.pid] = self
        deadline = time.monotonic() + 15
        while True:
            rc = proc.poll()
            if rc is not None:
                _LIVE.pop(proc.pid, None)
                log = self.read_log()
                if (
                    "Address already in use" in log
                    or "Could not create server TCP listening socket" in log
                ):
                    raise PortTaken(f"port {port} or TLS port {tls_port} in use")
                raise RuntimeError(f"redis-server exited with {rc} on port {port}:\n{log[-3000:]}")
            try:
                c = redis.Redis(
                    host="127.0.0.1", port=port, socket_timeout=1, socket_connect_timeout=1
                )
                try:
                    c.ping()
                    pid = int(c.info("server")["process_id"])
                finally:
                    c.close()
                if pid != proc.pid:
                    # Someone else's server answers on this port: ours will fail to bind.
                    self._kill_proc(proc)
                    raise PortTaken(f"port {port} answered by pid {pid}, not ours ({proc.pid})")
                break
            except (redis.ConnectionError, redis.TimeoutError, ConnectionError, OSError) as exc:
                if time.monotonic() > deadline:
                    self._kill_proc(proc)
                    log = self.read_log()[-3000:]
                    raise RuntimeError(
                        f"redis-server on port {port} did not answer PING:\n{log}"
                    ) from exc
                time.sleep(0.005)
            except redis.ResponseError as exc:
                # e.g. a foreign server with a password; treat as a collision.
                self._kill_proc(proc)
                raise PortTaken(f"port {port}: {exc}") from exc
        self.proc = proc
        self.port = port
        self.tls_port = tls_port
        self.stopped = False

    @staticmethod
    def _kill_proc(proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        _LIVE.pop(proc.pid, None)

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL by pid and reap."""
        self._drop_clients()
        if self.proc is not None:
            self._kill_proc(self.proc)
        self.stopped = False

    def stop(self) -> None:
        """SIGSTOP: the kernel still accepts connections and buffers data; nothing answers."""
        assert self.alive, self
        os.kill(self.proc.pid, signal.SIGSTOP)
        self._wait_state(lambda s: s == "T", "stopped")
        self.stopped = True

    def cont(self) -> None:
        """SIGCONT; when this returns, every command that was buffered while the server was
        stopped has been processed: two PINGs in sequence (the first is answered in an
        event-loop iteration at or after the one that read the buffered data; the second one is
        read in a later iteration), then until no client's bytes are left unread (a client that
        wrote more than the server reads in one iteration)."""
        assert self.alive, self
        os.kill(self.proc.pid, signal.SIGCONT)
        self._wait_state(lambda s: s != "T", "running")
        self.stopped = False
        c = redis.Redis(
            host="127.0.0.1", port=self.port, socket_timeout=10, password=self._admin_password
        )
        try:
            c.ping()
            c.ping()
            self._wait_backlog_read(c)
        finally:
            c.close()

    def _wait_backlog_read(self, c: redis.Redis) -> None:
        """Until the server has read every byte its clients sent it (none waits in a socket's
        receive queue: it reads at most 16 KB per client per event-loop iteration, so a client
        that wrote more while it was stopped is not done after the two PINGs), then one more
        PING: it is answered after the commands of that last read have run (a query buffer left
        then holds a command whose end its client has not sent yet)."""
        deadline = time.monotonic() + 10
        while unread := _unread_bytes(self.port):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self}: {unread} bytes of its clients still unread after 10 s")
            time.sleep(0.005)
        c.ping()

    def _wait_state(self, pred, what: str) -> None:
        deadline = time.monotonic() + 5
        while True:
            st = _proc_state(self.proc.pid)
            if st is not None and pred(st):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"redis-server pid {self.proc.pid} did not become {what} (state {st})"
                )
            time.sleep(0.001)

    def restart(self) -> None:
        """Kill (if alive) and start again on the same port (retried a little: another session
        may grab the port in between, in which case PortTaken is raised)."""
        port, tls_port = self.port, self.tls_port
        self.kill()
        self._admin_password = None
        self._start_on(port, attempts=40, tls_port=tls_port)

    def cleanup(self) -> None:
        """Kill by pid and remove the temporary directory.  Idempotent."""
        try:
            self.kill()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- clients ---------------------------------------------------------------------------
    def admin(self) -> redis.Redis:
        """A cached redis-py client for assertions/setup, named ADMIN_NAME in CLIENT LIST."""
        if self._admin is None:
            self._admin = redis.Redis(
                host="127.0.0.1",
                port=self.port,
                client_name=ADMIN_NAME,
                socket_timeout=10,
                password=self._admin_password,
            )
        return self._admin

    def client(self, **kw) -> redis.Redis:
        """A new redis-py client (closed at teardown)."""
        kw.setdefault("socket_timeout", 10)
        c = redis.Redis(host="127.0.0.1", port=self.port, **kw)
        self._clients.append(c)
        return c

    def tls_client(self, **kw) -> redis.Redis:
        """A new redis-py client on the TLS port (closed at teardown); trusts the server's CA
        unless `ssl_ca_certs` says otherwise."""
        assert self.tls is not None and self.tls_port is not None, "not a TLS server"
        kw.setdefault("socket_timeout", 10)
        kw.setdefault("ssl_ca_certs", self.tls.ca_file)
        c = redis.Redis(host="127.0.0.1", port=self.tls_port, ssl=True, **kw)
        self._clients.append(c)
        return c

    def set_password(self, password: str | None) -> None:
        self.admin().config_set("requirepass", password or "")
        self._drop_clients()
        self._admin_password = password

    def _drop_clients(self) -> None:
        if self._admin is not None:
            with contextlib.suppress(Exception):
                self._admin.close()
            self._admin = None
        for c in self._clients:
            with contextlib.suppress(Exception):
                c.close()
        self._clients.clear()

    def read_log(self) -> str:
        try:
            with open(self.logfile, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    # -- inspection ------------------------------------------------------------------------
    def foreign_clients(self) -> list[dict]:
        """CLIENT LIST entries that are not our admin connection (i.e. the library's)."""
        return [c for c in self.admin().client_list() if c.get("name") != ADMIN_NAME]


def _kill_all_at_exit() -> None:
    if os.getpid() != _OWNER_PID:  # a forked child: the servers are the parent's
        return
    for srv in list(_LIVE.values()):
        with contextlib.suppress(Exception):
            srv.cleanup()


atexit.register(_kill_all_at_exit)


def _on_sigterm(signum, frame):
    # `timeout`, CI cancellation: atexit does not run on SIGTERM, so clean up here (servers would
    # die anyway through PDEATHSIG, but their temporary directories would stay), then die of it.
    _kill_all_at_exit()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


# Only where nobody else handles SIGTERM, and only from the main thread (signal() requires it).
if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
    with contextlib.suppress(ValueError):
        signal.signal(signal.SIGTERM, _on_sigterm)


class BlackHole:
    """A loopback port whose accept queue is full: connect() to it hangs (SYNs are dropped), like
    a host that vanished from the network.  Proves that a dead master costs its timeout, not the
    kernel's TCP connect timeout."""

    def __init__(self):
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(0)
        self.port = self.listener.getsockname()[1]
        self.fillers = []
        for _ in range(4):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                s.connect(("127.0.0.1", self.port))
            self.fillers.append(s)
        # Wait until a probe connect really hangs.
        deadline = time.monotonic() + 5
        while True:
            probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            probe.settimeout(0.05)
            try:
                probe.connect(("127.0.0.1", self.port))
            except (TimeoutError, socket.timeout):
                probe.close()
                break
            except OSError:
                probe.close()
            else:
                self.fillers.append(probe)
            if time.monotonic() > deadline:
                raise RuntimeError("could not build a black-hole port")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def close(self) -> None:
        for s in self.fillers:
            s.close()
        self.listener.close()


class Canary:
    """A listening loopback socket that nobody should ever connect to: any connection attempt
    lands in its accept queue (the kernel completes the handshake), so `touched()` is a sound
    "was there any I/O towards this master" check."""

    def __init__(self):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.sock.setblocking(False)
        self.port = self.sock.getsockname()[1]
        self.accepted = []

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def touched(self) -> bool:
        try:
            conn, _ = self.sock.accept()
        except BlockingIOError:
            return bool(self.accepted)
        self.accepted.append(conn)
        return True

    def close(self) -> None:
        for c in self.accepted:
            c.close()
        self.sock.close()


def _unread_bytes(port: int) -> int:
    """Bytes waiting in the receive queues of the sockets accepted on 127.0.0.1:`port`
    (/proc/net/tcp: local address, then the transmit and receive queues)."""
    local = f"0100007F:{port:04X}"
    unread = 0
    with open("/proc/net/tcp") as f:
        next(f)
        for line in f:
            fields = line.split()
            # ESTABLISHED, or CLOSE_WAIT: a client that shut its side down after its last
            # command (_engines/drain.py) still has those commands in the queue
            if fields[1] == local and fields[3] in ("01", "08"):
                unread += int(fields[4].split(":")[1], 16)
    return unread
