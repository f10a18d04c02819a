"""A Sentinel-managed group for the tests: one master, one replica, three sentinels, all real
redis-server processes on free loopback ports (see servers.py for how ports are chosen and why a
server only counts as started once the process answering reports our pid).

* The master and the replica are servers.RedisServer (the replica with --replicaof); both get
  --repl-diskless-sync-delay 0 (the default 5 s would hold every full sync, and so a failover).
* Each sentinel is `redis-server <its own sentinel.conf> --sentinel` (sentinels rewrite their
  config file, so each has its own, in its own temporary directory), monitoring the group under a
  service name unique to this run (a stale sentinel of another session that happens to watch a
  reused port would otherwise take ours for its own group), with quorum 2,
  down-after-milliseconds 1000 and failover-timeout 5000.
* Sentinels get PR_SET_PDEATHSIG=SIGKILL, are killed by pid (never by name) in cleanup(), and an
  atexit hook (and SIGTERM, chained to servers.py's handler) kills whatever is still registered.

The group's roles move with failovers: `Group.master` / `Group.replica` are the servers that hold
those roles *now* (as the sentinels report it), `Group.servers` the two servers in a fixed order.

Waiting on the sentinels (ready(), wait_for_new_master()) polls with a deadline: these wait for
an external event (sentinels' gossip, a promotion), there is nothing to synchronise on.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid

import pytest
import redis
import redis.sentinel
import servers
from servers import PortTaken, RedisServer

DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 5000
QUORUM = 2
# How long a fresh group (or one after a failover) may take to be ready: sentinels say hello every
# 2 s and refresh a replica's INFO every 10 s (1 s during a failover).
READY_TIMEOUT = 30.0

_LIVE: dict[int, SentinelServer] = {}
_OWNER_PID = os.getpid()


def _pdeathsig():
    # Runs in the child between fork and exec: die with the parent (pytest) if it is killed.
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


def _address(reply) -> tuple[str, int] | None:
    """SENTINEL GET-MASTER-ADDR-BY-NAME's reply as (host, port); None for a nil reply."""
    if reply is None:
        return None
    host, port = reply
    host = host.decode() if isinstance(host, bytes) else host
    return host, int(port)


class SentinelServer:
    """One sentinel process on 127.0.0.1:<port>, monitoring `service_name` at master_port."""

    def __init__(self, master_port: int, service_name: str):
        servers.require_redis_server()
        self.master_port = master_port
        self.service_name = service_name
        self.dir = tempfile.mkdtemp(prefix="hlsentinel-")
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self._client: redis.Redis | None = None
        try:
            last = None
            for _ in range(20):
                try:
                    self._spawn_and_wait(servers.free_port())
                    break
                except PortTaken as exc:
                    last = exc
            else:
                raise RuntimeError(f"could not start a sentinel on a free port: {last}")
        except BaseException:
            self.cleanup()
            raise

    @property
    def conf(self) -> str:
        return os.path.join(self.dir, "sentinel.conf")

    @property
    def logfile(self) -> str:
        return os.path.join(self.dir, "sentinel.log")

    @property
    def address(self) -> str:
        """host:port, as the library's sentinel lists take it."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def __repr__(self) -> str:
        return f"<SentinelServer port={self.port} pid={self.pid} alive={self.alive}>"

    def _write_conf(self, port: int) -> None:
        name = self.service_name
        with open(self.conf, "w") as f:
            f.write(
                f"port {port}\n"
                "bind 127.0.0.1\n"
                "daemonize no\n"
                f"dir {self.dir}\n"
                f"logfile {self.logfile}\n"
                f"sentinel monitor {name} 127.0.0.1 {self.master_port} {QUORUM}\n"
                f"sentinel down-after-milliseconds {name} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {name} {FAILOVER_TIMEOUT_MS}\n"
            )

    def _spawn_and_wait(self, port: int) -> None:
        self._write_conf(port)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.logfile)
        proc = subprocess.Popen(
            [servers.REDIS_SERVER, self.conf, "--sentinel"],
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
                if "Address already in use" in log or "Could not create server TCP" in log:
                    raise PortTaken(f"port {port} in use")
                raise RuntimeError(f"sentinel exited with {rc} on port {port}:\n{log[-3000:]}")
            c = redis.Redis(host="127.0.0.1", port=port, socket_timeout=1, socket_connect_timeout=1)
            try:
                c.ping()
                info = c.info("server")
                pid, mode = int(info["process_id"]), info.get("redis_mode")
            except (redis.ConnectionError, redis.TimeoutError, ConnectionError, OSError) as exc:
                if time.monotonic() > deadline:
                    self._kill_proc(proc)
                    raise RuntimeError(
                        f"sentinel on port {port} did not answer PING:\n{self.read_log()[-3000:]}"
                    ) from exc
                time.sleep(0.005)
                continue
            except redis.ResponseError as exc:  # a foreign server with a password
                self._kill_proc(proc)
                raise PortTaken(f"port {port}: {exc}") from exc
            finally:
                c.close()
            if pid != proc.pid:
                self._kill_proc(proc)
                raise PortTaken(f"port {port} answered by pid {pid}, not ours ({proc.pid})")
            if mode != "sentinel":
                self._kill_proc(proc)
                raise RuntimeError(f"our process on port {port} runs in mode {mode!r}")
            break
        self.proc = proc
        self.port = port

    @staticmethod
    def _kill_proc(proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        _LIVE.pop(proc.pid, None)

    def client(self) -> redis.Redis:
        """A cached redis-py client for this sentinel."""
        if self._client is None:
            self._client = redis.Redis(
                host="127.0.0.1", port=self.port, socket_timeout=5, socket_connect_timeout=5
            )
        return self._client

    def master_address(self) -> tuple[str, int] | None:
        """(host, port) this sentinel names as the group's master (None: it knows no such
        group)."""
        reply = self.client().execute_command(
            "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service_name
        )
        return _address(reply)

    def stop(self) -> None:
        """SIGSTOP: the kernel still accepts connections to it and buffers what they send; it
        answers nothing (a lookup waits for its timeout)."""
        os.kill(self.proc.pid, signal.SIGSTOP)
        self._wait_state(lambda state: state == "T", "stopped")

    def cont(self) -> None:
        """SIGCONT."""
        os.kill(self.proc.pid, signal.SIGCONT)
        self._wait_state(lambda state: state != "T", "running")

    def _wait_state(self, pred, what: str) -> None:
        deadline = time.monotonic() + 5
        while True:
            state = servers._proc_state(self.proc.pid)
            if state is not None and pred(state):
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"sentinel pid {self.proc.pid} did not become {what} ({state})")
            time.sleep(0.001)

    def kill(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
            self._client = None
        if self.proc is not None:
            self._kill_proc(self.proc)

    def cleanup(self) -> None:
        """Kill by pid and remove the temporary directory.  Idempotent."""
        try:
            self.kill()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def read_log(self) -> str:
        try:
            with open(self.logfile, errors="replace") as f:
                return f.read()
        except OSError:
            return ""


def _flags(state: dict) -> set[str]:
    """The flags of a SENTINEL MASTER / REPLICAS / SENTINELS entry (redis-py parses them into
    is_* booleans; the raw text is kept under 'flags')."""
    raw = state.get("flags", "")
    if isinstance(raw, bytes):
        raw = raw.decode()
    if isinstance(raw, str):
        return set(filter(None, raw.split(",")))
    return set(raw)


def _sentinel_state(sentinel: SentinelServer, what: str, service_name: str) -> list[dict]:
    """SENTINEL MASTER / REPLICAS / SENTINELS <service_name> as redis-py parses them (dicts; the
    raw flags under 'flags')."""
    client = sentinel.client()
    if what == "MASTER":
        return [client.sentinel_master(service_name)]
    if what == "REPLICAS":
        return list(client.sentinel_slaves(service_name))
    assert what == "SENTINELS", what
    return list(client.sentinel_sentinels(service_name))


class Group:
    """A master, its replica and the sentinels watching them (see the module's docstring)."""

    def __init__(self, n_sentinels: int = 3, service_name: str | None = None):
        self.service_name = service_name or f"hl-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.servers: list[RedisServer] = []
        self.sentinels: list[SentinelServer] = []
        self._redis_py: list[redis.sentinel.Sentinel] = []
        try:
            extra = ("--repl-diskless-sync-delay", "0")
            first = RedisServer(extra_args=extra)
            self.servers.append(first)
            replicaof = ("--replicaof", "127.0.0.1", str(first.port))
            self.servers.append(RedisServer(extra_args=extra + replicaof))
            for _ in range(n_sentinels):
                self.sentinels.append(SentinelServer(first.port, self.service_name))
            self.ready()
        except BaseException:
            self.cleanup()
            raise

    # -- what the library is given ---------------------------------------------------------
    def sentinel_addresses(self) -> list[str]:
        """The sentinels as "127.0.0.1:port" strings."""
        return [s.address for s in self.sentinels]

    def url(self, service_name: str | None = None, db: int = 0, credentials: str = "") -> str:
        """redis+sentinel://[credentials@]h:p,h:p,h:p/service_name/db"""
        at = f"{credentials}@" if credentials else ""
        places = ",".join(self.sentinel_addresses())
        return f"redis+sentinel://{at}{places}/{service_name or self.service_name}/{db}"

    def name(self, db: int = 0) -> str:
        """The master's name in votes and inspect(): the URL without credentials."""
        return self.url(db=db)

    def as_dict(self, **more) -> dict:
        """The dict form: sentinels as "host:port" strings and (host, port) pairs, mixed."""
        places: list = []
        for i, s in enumerate(self.sentinels):
            places.append(s.address if i % 2 == 0 else ("127.0.0.1", s.port))
        return {"sentinels": places, "service_name": self.service_name, **more}

    def redis_py_sentinel(self, **kw) -> redis.sentinel.Sentinel:
        """A redis-py Sentinel over our sentinels (its connections closed at cleanup)."""
        kw.setdefault("socket_timeout", 5)
        sentinel = redis.sentinel.Sentinel([("127.0.0.1", s.port) for s in self.sentinels], **kw)
        self._redis_py.append(sentinel)
        return sentinel

    # -- roles -----------------------------------------------------------------------------
    def current_master(self) -> tuple[str, int]:
        """The master's (host, port) as the first sentinel that answers names it."""
        reasons = []
        for s in self.sentinels:
            try:
                address = s.master_address()
            except redis.RedisError as exc:
                reasons.append(f"{s.address}: {exc}")
                continue
            if address is not None:
                return address
            reasons.append(f"{s.address}: no master named {self.service_name!r}")
        raise AssertionError(f"no sentinel names a master: {'; '.join(reasons)}")

    def server_at(self, address: tuple[str, int]) -> RedisServer:
        for srv in self.servers:
            if (srv.host, srv.port) == tuple(address):
                return srv
        raise AssertionError(f"{address} is none of the group's servers {self.servers}")

    @property
    def master(self) -> RedisServer:
        """The server the sentinels name as master now."""
        return self.server_at(self.current_master())

    @property
    def replica(self) -> RedisServer:
        """The other server."""
        master = self.master
        (other,) = [srv for srv in self.servers if srv is not master]
        return other

    @staticmethod
    def role(srv: RedisServer) -> list:
        """ROLE: ['master', offset, replicas] or ['slave', host, port, state, offset]."""
        return [
            x.decode() if isinstance(x, bytes) else x for x in srv.admin().execute_command("ROLE")
        ]

    # -- failover --------------------------------------------------------------------------
    def failover(self, sentinel: int = 0) -> tuple[str, int]:
        """SENTINEL FAILOVER on one sentinel, once the group is ready for one; returns the old
        master's address (to pass to wait_for_new_master)."""
        self.ready()
        old = self.current_master()
        reply = (
            self.sentinels[sentinel]
            .client()
            .execute_command("SENTINEL", "FAILOVER", self.service_name)
        )
        assert reply in (True, b"OK", "OK"), reply
        return old

    def wait_for_new_master(self, old: tuple[str, int], timeout: float = 30.0) -> tuple[str, int]:
        """Polls until every sentinel names the same master, other than `old`, and that server's
        ROLE is master; returns its address."""
        deadline = time.monotonic() + timeout
        seen: object = None
        while True:
            seen = self._agreed_master()
            if (
                seen is not None
                and seen != tuple(old)
                and self.role(self.server_at(seen))[0] == "master"
            ):
                return seen
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"after {timeout} s the sentinels still do not agree on a new master "
                    f"(old {old}, last seen {seen}): {self._describe()}"
                )
            time.sleep(0.02)

    def _agreed_master(self) -> tuple[str, int] | None:
        """The master every sentinel names, or None when they do not all name the same one."""
        try:
            named = {s.master_address() for s in self.sentinels}
        except redis.RedisError:
            return None
        if len(named) != 1:
            return None
        (address,) = named
        return address

    # -- readiness -------------------------------------------------------------------------
    def ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Waits until the group can serve and fail over: every sentinel names the same master,
        whose ROLE is master and which no sentinel sees failing over; the other server is its
        replica with the link up; every sentinel lists that replica as healthy and knows the
        other sentinels."""
        deadline = time.monotonic() + timeout
        while True:
            why = self._not_ready()
            if why is None:
                return
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"the sentinel group was not ready after {timeout} s: {why}; {self._describe()}"
                )
            time.sleep(0.02)

    def _not_ready(self) -> str | None:
        try:
            master = self._agreed_master()
            if master is None:
                return "the sentinels do not name one master"
            srv = self.server_at(master)
            if self.role(srv)[0] != "master":
                return f"{master} is not (yet) a master"
            (other,) = [s for s in self.servers if s is not srv]
            role = self.role(other)
            if role[:4] != ["slave", "127.0.0.1", srv.port, "connected"]:
                return f"the other server is not a connected replica of {master}: {role}"
            for s in self.sentinels:
                (state,) = _sentinel_state(s, "MASTER", self.service_name)
                if _flags(state) != {"master"}:
                    return f"sentinel {s.address} flags the master {sorted(_flags(state))}"
                replicas = _sentinel_state(s, "REPLICAS", self.service_name)
                # What SENTINEL FAILOVER needs of a replica to promote (sentinelSelectSlave):
                # linked, not down. (Its master-link-status there lags: INFO every 10 s.)
                healthy = [
                    r for r in replicas if r.get("port") == other.port and _flags(r) == {"slave"}
                ]
                if not healthy:
                    flags = [(r.get("port"), sorted(_flags(r))) for r in replicas]
                    return f"sentinel {s.address} does not see a healthy replica: {flags}"
                peers = _sentinel_state(s, "SENTINELS", self.service_name)
                known = {int(p["port"]) for p in peers if _flags(p) == {"sentinel"}}
                others = {o.port for o in self.sentinels if o is not s}
                if not others <= known:
                    return f"sentinel {s.address} knows sentinels {sorted(known)} of {others}"
        except redis.RedisError as exc:
            return f"{type(exc).__name__}: {exc}"
        return None

    def _describe(self) -> str:
        parts = []
        for s in self.sentinels:
            try:
                parts.append(f"{s.address} names {s.master_address()}")
            except redis.RedisError as exc:
                parts.append(f"{s.address}: {exc}")
        for srv in self.servers:
            try:
                parts.append(f"port {srv.port} ROLE {self.role(srv)}")
            except redis.RedisError as exc:
                parts.append(f"port {srv.port}: {exc}")
        return "; ".join(parts)

    def reset(self) -> None:
        """Ready, then empty (FLUSHALL and SCRIPT FLUSH on the master; replicated), with the
        replica caught up (WAIT 1)."""
        self.ready()
        admin = self.master.admin()
        admin.flushall()
        admin.script_flush()
        assert admin.execute_command("WAIT", 1, 5000) == 1, "the replica did not catch up"

    # -- teardown --------------------------------------------------------------------------
    def cleanup(self) -> None:
        """Sentinels first (so that none reacts to the servers going away), then the servers."""
        for sentinel in self._redis_py:
            for client in sentinel.sentinels:
                with contextlib.suppress(Exception):
                    client.close()
        self._redis_py.clear()
        for s in self.sentinels:
            s.cleanup()
        for srv in self.servers:
            srv.cleanup()


def _kill_all_at_exit() -> None:
    if os.getpid() != _OWNER_PID:  # a forked child: the sentinels are the parent's
        return
    for s in list(_LIVE.values()):
        with contextlib.suppress(Exception):
            s.cleanup()


atexit.register(_kill_all_at_exit)


def _chain_sigterm() -> None:
    """On SIGTERM, kill our sentinels first, then hand over to the handler that was there
    (servers.py's, which cleans up the servers and dies of the signal)."""
    previous = signal.getsignal(signal.SIGTERM)
    if not callable(previous):
        return

    def on_sigterm(signum, frame):
        _kill_all_at_exit()
        previous(signum, frame)

    with contextlib.suppress(ValueError):  # not the main thread
        signal.signal(signal.SIGTERM, on_sigterm)


_chain_sigterm()


# -- pytest fixtures ------------------------------------------------------------------------------
# A test module imports them by their function names (the fixtures are named without _fixture):
#   from sentinels import sentinel_group_fixture, sentinel_group_session_fixture


@pytest.fixture(name="sentinel_group_session", scope="session")
def sentinel_group_session_fixture(redis_server_bin):
    group = Group()
    yield group
    group.cleanup()


@pytest.fixture(name="sentinel_group")
def sentinel_group_fixture(sentinel_group_session):
    """A session-wide Group, ready and empty. Tests must not fail it over or stop its servers
    (the library's lookups of a group are cached per process: use fresh_sentinel_group)."""
    sentinel_group_session.reset()
    return sentinel_group_session


@pytest.fixture(name="fresh_sentinel_group")
def fresh_sentinel_group_fixture(redis_server_bin):
    """A Group of this test's own (a service name no earlier test's lookups know): for a test
    that fails it over."""
    group = Group()
    yield group
    group.cleanup()
