"""Masters inside a network namespace of our own, with network faults made by nftables inside it.

Root only (unavailable() says why not).  The test creates namespace hlf<pid> and a veth pair
hlf<pid>a (host side, 10.200.X.1/30) / hlf<pid>b (namespace side, 10.200.X.2/30), with X from our
pid: only addresses we create, traffic never leaves this machine.  The masters listen on
10.200.X.2 inside the namespace; the test reaches them for its own checks through their unix
sockets, which no network fault touches.  The faults are rules in table `inet hlfault`, *inside*
the namespace: the host's rules are never read nor changed.  cleanup() kills every server by pid,
deletes the veth pair and the namespace (also at exit, should the test die).

Fault kinds: partition (DROP both ways), reject (REJECT with tcp-reset), reply_drop (one way:
the master's replies are dropped), loss (20% of the packets dropped at random, both ways), plus
the process faults of FaultyMasters (kill, sigstop, ...).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import random
import re
import shutil
import signal
import subprocess
import time

import redis
from servers import _LIVE, ADMIN_NAME, RedisServer, _pdeathsig

from .masters import Fault, FaultyMasters


def unavailable() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool, package in (("ip", "iproute2"), ("nft", "nftables")):
        if not shutil.which(tool):
            return f"{tool} is missing (apt-get install {package}; `make soak` does it as root)"
    probe = f"hlfprobe{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        return f"cannot create a network namespace here: {r.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _run(*args, check=True, input=None) -> str:
    r = subprocess.run(list(args), capture_output=True, text=True, input=input)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


class NetnsServer(RedisServer):
    """A redis-server inside namespace `ns`, bound to `addr`; admin through its unix socket."""

    def __init__(self, ns: str, addr: str, port: int) -> None:
        self.ns = ns
        self.addr = addr
        super().__init__(port=port)

    @property
    def host(self) -> str:
        return self.addr

    @property
    def url(self) -> str:
        return f"redis://{self.addr}:{self.port}/0"

    def _args(self, port: int, tls_port: int | None = None) -> list[str]:
        args = super()._args(port, tls_port)
        args[args.index("--bind") + 1] = self.addr
        # Clients come from the host end of our veth pair, not from loopback: protected mode
        # would refuse them.  Nothing but that veth pair reaches this namespace.
        return ["ip", "netns", "exec", self.ns, *args, "--protected-mode", "no"]

    def _unix_client(self, timeout=10, name=None) -> redis.Redis:
        return redis.Redis(
            unix_socket_path=self.unixsocket,
            socket_timeout=timeout,
            client_name=name,
            password=self._admin_password,
        )

    def _spawn_and_wait(self, port: int, tls_port: int | None = None) -> None:
        # (RedisServer._start_on passes a TLS port, None for a plaintext server: these are)
        if tls_port is not None:
            raise ValueError("a server in a network namespace has no TLS port")
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
            if proc.poll() is not None:
                _LIVE.pop(proc.pid, None)
                raise RuntimeError(f"redis-server in {self.ns} exited:\n{self.read_log()[-2000:]}")
            try:
                c = self._unix_client(timeout=1)
                try:
                    c.ping()
                    pid = int(c.info("server")["process_id"])
                finally:
                    c.close()
                if pid != proc.pid:
                    self._kill_proc(proc)
                    raise RuntimeError(f"{self.unixsocket} answered by pid {pid}, not {proc.pid}")
                break
            except (redis.ConnectionError, redis.TimeoutError, OSError):
                if time.monotonic() > deadline:
                    self._kill_proc(proc)
                    raise RuntimeError(f"redis-server in {self.ns} did not answer") from None
                time.sleep(0.005)
        self.proc = proc
        self.port = port
        self.stopped = False

    def admin(self) -> redis.Redis:
        if self._admin is None:
            self._admin = self._unix_client(name=ADMIN_NAME)
        return self._admin

    def cont(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)
        self._wait_state(lambda s: s != "T", "running")
        self.stopped = False
        c = self._unix_client()
        try:
            c.ping()
            c.ping()
        finally:
            c.close()


class NetnsMasters(FaultyMasters):
    def __init__(self, n: int = 5, *, aof: bool = True) -> None:
        import concurrent.futures
        import threading

        pid = os.getpid()
        self.ns = f"hlf{pid}"
        self.veth_host, self.veth_ns = f"hlf{pid}a", f"hlf{pid}b"
        x = pid % 250 + 1
        self.host_addr, self.addr = f"10.200.{x}.1", f"10.200.{x}.2"
        self.aof = aof
        self.extra_args = ("--appendonly", "yes", "--appendfsync", "always") if aof else ()
        self.servers = []
        self.proxy = None
        self.schedule = []
        self._t0 = time.monotonic()
        self._raw = []
        self._keepers = {}
        self._restart_timers = []
        self._mutex = threading.Lock()
        self._spawners = concurrent.futures.ThreadPoolExecutor(n, thread_name_prefix="spawner")
        self._cleaned = False
        atexit.register(self.cleanup)
        try:
            self._make_namespace()
            for i in range(n):
                self.servers.append(NetnsServer(self.ns, self.addr, 7001 + i))
        except BaseException:
            self.cleanup()
            raise

    def _make_namespace(self) -> None:
        _run("ip", "netns", "add", self.ns)
        _run("ip", "-n", self.ns, "link", "set", "lo", "up")
        _run("ip", "link", "add", self.veth_host, "type", "veth", "peer", "name", self.veth_ns)
        _run("ip", "link", "set", self.veth_ns, "netns", self.ns)
        _run("ip", "addr", "add", f"{self.host_addr}/30", "dev", self.veth_host)
        _run("ip", "link", "set", self.veth_host, "up")
        _run("ip", "-n", self.ns, "addr", "add", f"{self.addr}/30", "dev", self.veth_ns)
        _run("ip", "-n", self.ns, "link", "set", self.veth_ns, "up")
        self.nft(
            "add table inet hlfault\n"
            "add chain inet hlfault input { type filter hook input priority 0 ; }\n"
            "add chain inet hlfault output { type filter hook output priority 0 ; }\n"
        )

    def nft(self, script: str) -> str:
        """Runs an nft script inside our namespace (never on the host)."""
        return _run("ip", "netns", "exec", self.ns, "nft", "-f", "-", input=script)

    def urls(self, via: str = "netns", idx=None) -> list[str]:
        idx = range(len(self.servers)) if idx is None else idx
        return [self.servers[i].url for i in idx]

    def raw_address(self, i: int):
        return self.servers[i].unixsocket

    def _restart(self, i: int, delay: float) -> None:
        if delay:
            time.sleep(delay)
        self.servers[i].restart()
        self.log(f"restart m{i} (pid {self.servers[i].pid}, aof={self.aof})")

    # -- network faults ------------------------------------------------------------------------
    def add_rules(self, tag: str, rules: list[tuple[str, str]]) -> None:
        self.nft(
            "".join(
                f'add rule inet hlfault {chain} {rule} comment "{tag}"\n' for chain, rule in rules
            )
        )

    def delete_rules(self, tag: str) -> None:
        for chain in ("input", "output"):
            listing = _run(
                "ip",
                "netns",
                "exec",
                self.ns,
                "nft",
                "-a",
                "list",
                "chain",
                "inet",
                "hlfault",
                chain,
            )
            for handle in re.findall(rf'comment "{re.escape(tag)}" # handle (\d+)', listing):
                self.nft(f"delete rule inet hlfault {chain} handle {handle}\n")

    def heal(self) -> None:
        if not self._cleaned:
            self.nft("flush chain inet hlfault input\nflush chain inet hlfault output\n")
        super().heal()

    def cleanup(self) -> None:
        if self._cleaned:
            return
        self._cleaned = True
        with contextlib.suppress(Exception):
            super().cleanup()
        subprocess.run(["ip", "link", "del", self.veth_host], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True)


NET_KINDS = ("partition", "reject", "reply_drop", "loss")


class NetFault(Fault):
    """A network fault on some masters, by nftables rules inside the namespace."""

    def _rules(self, port: int) -> list[tuple[str, str]]:
        if self.kind == "partition":
            return [("input", f"tcp dport {port} drop"), ("output", f"tcp sport {port} drop")]
        if self.kind == "reject":
            return [("input", f"tcp dport {port} reject with tcp reset")]
        if self.kind == "reply_drop":
            return [("output", f"tcp sport {port} drop")]
        if self.kind == "loss":
            pct = self.params.get("percent", 20)
            return [
                ("input", f"tcp dport {port} numgen random mod 100 < {pct} drop"),
                ("output", f"tcp sport {port} numgen random mod 100 < {pct} drop"),
            ]
        raise ValueError(self.kind)

    def apply(self, masters: NetnsMasters, idx) -> None:
        for i in idx:
            masters.log(f"nft m{i} {self}")
            masters.add_rules(f"m{i}-{self.kind}", self._rules(masters.servers[i].port))

    def heal(self, masters: NetnsMasters, idx) -> None:
        for i in idx:
            masters.log(f"nft m{i} {self} healed")
            masters.delete_rules(f"m{i}-{self.kind}")


def random_fault(rng: random.Random, ttl: float, drift: float) -> tuple[Fault, float]:
    kind = rng.choice(
        ["partition", "partition", "reject", "reply_drop", "loss", "loss", "kill", "sigstop"]
    )
    if kind == "kill":
        return Fault(kind), round(ttl + drift + 0.05, 3)
    if kind == "sigstop":
        return Fault(kind), round(rng.uniform(0.1, 3.0), 3)
    if kind == "loss":
        return NetFault(kind, {"percent": 20}), round(rng.uniform(1.0, 3.0), 3)
    return NetFault(kind), round(rng.uniform(0.3, 2.0), 3)
