"""One acquire+release cycle per library, on the same masters, the same N and the same ttl.

Each `open_cycle(lib, ports, name)` returns a Cycler: `run(k)` does k cycles on one name (a
non-blocking acquire that must succeed, then a release), `close()` drops the connections. Lock
objects are made once, outside the timed code, for every library that has them; each library
still makes its own fresh token per acquire (python-redis-lock: one id per Lock object, by its
design). Connections are opened by the warm-up, never inside a timed round.
"""

from __future__ import annotations

import ctypes
import os

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
BUILD_DIR = os.environ.get("BENCH_BUILD_DIR", os.path.join(BENCH_DIR, "build"))
HOST = "127.0.0.1"
TTL_S = 10  # every lock in every row: 10 s (10000 ms), far longer than any round

# Rows of the single-cycle table: library -> masters counts it supports (Redlock: any N;
# single-instance locks: N=1 only).
LIBS = {
    "native": (1, 3, 5),
    "python": (1, 3, 5),
    "cref": (1, 3, 5),
    "pottery": (1, 3, 5),
    "redlock-py": (1, 3, 5),
    "redis-py": (1,),
    "python-redis-lock": (1,),
}

LABELS = {
    "native": "hiredlock native",
    "python": "hiredlock python",
    "cref": "C reference (libhiredis)",
    "pottery": "pottery Redlock",
    "redlock-py": "redlock-py",
    "redis-py": "redis-py Lock",
    "python-redis-lock": "python-redis-lock",
    "redlock-ng": "redlock-ng",
}


class NotAcquired(RuntimeError):
    """An uncontended acquire failed: the row would measure something else, so it errors."""


class Cycler:
    lib: str
    failures: list = []  # noqa: RUF012  (only hiredlock's cycler counts failed cycles)

    def run(self, k: int) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def close(self) -> None:
        pass


class HiredlockCycler(Cycler):
    """hiredlock's Lock. A cycle that fails on a busy machine is counted, not raised: the engines
    give each master `master_timeout` (50 ms at this ttl) per round, and a client preempted for
    longer than that between its writes and its poll() records TIMEOUT votes (LockLost on the
    release) although every reply has arrived. Such cycles are kept in the timing and reported
    (`failures`); more than MAX_FAILURE_RATE of them fails the row. The same stall on an acquire
    raises QuorumUnreachable (blocking=False) or returns False."""

    MAX_FAILURE_RATE = 0.01

    def __init__(self, engine: str, ports, name: str, tls_ca: str | None = None, fresh=False):
        from hiredlock import Redlock

        self.lib = engine
        if tls_ca is None:
            urls = [f"redis://{HOST}:{p}/0" for p in ports]
        else:
            urls = [f"rediss://{HOST}:{p}/0?ssl_ca_certs={tls_ca}" for p in ports]
        self.redlock = Redlock(urls, backend=engine)
        assert self.redlock.backend == engine, self.redlock.backend
        self.lock = self.redlock.lock(name, ttl=TTL_S)
        # fresh: a new lock object per cycle, as `with redlock.lock(name, ttl):` makes one (its
        # validation and set-up counted in the cycle)
        self.name = name if fresh else None
        self.cycles = 0
        self.failures: list[str] = []

    def run(self, k: int) -> None:
        from hiredlock import LockLost, LockNotAcquired

        lock, name, redlock = self.lock, self.name, self.redlock
        for _ in range(k):
            if name is not None:
                lock = redlock.lock(name, ttl=TTL_S)
            try:
                acquired = lock.acquire(blocking=False)
            except LockNotAcquired as exc:  # QuorumUnreachable: every master TIMEOUT
                self._failed(f"acquire: {exc}")
                continue
            if not acquired:
                self._failed(f"acquire: {lock.last_votes}")
                continue
            try:
                lock.release()
            except LockLost as exc:
                self._failed(f"release: {exc}")
        self.cycles += k

    def _failed(self, what: str) -> None:
        self.failures.append(what)
        if len(self.failures) > max(10, self.MAX_FAILURE_RATE * self.cycles):
            raise NotAcquired(
                f"hiredlock {self.lib}: {len(self.failures)} failed cycles of about "
                f"{self.cycles}; last: {what}"
            )

    def close(self) -> None:
        self.redlock.close()


class CRefLib:
    """ctypes binding of bench/build/libcref.so (bench/cref.c built with -DCREF_LIB)."""

    _lib = None

    @classmethod
    def load(cls):
        if cls._lib is None:
            path = os.path.join(BUILD_DIR, "libcref.so")
            if not os.path.exists(path):
                raise FileNotFoundError(
                    f"{path} is missing: `make bench` builds it from bench/cref.c"
                )
            lib = ctypes.CDLL(path)
            lib.cref_open.restype = ctypes.c_void_p
            lib.cref_open.argtypes = [
                ctypes.c_char_p,
                ctypes.POINTER(ctypes.c_int),
                ctypes.c_int,
                ctypes.c_char_p,
                ctypes.c_long,
                ctypes.c_char_p,
                ctypes.c_int,
            ]
            lib.cref_cycles.restype = ctypes.c_int
            lib.cref_cycles.argtypes = [ctypes.c_void_p, ctypes.c_long]
            lib.cref_error.restype = ctypes.c_char_p
            lib.cref_error.argtypes = [ctypes.c_void_p]
            lib.cref_close.restype = None
            lib.cref_close.argtypes = [ctypes.c_void_p]
            cls._lib = lib
        return cls._lib


class CRefCycler(Cycler):
    lib = "cref"

    def __init__(self, ports, name: str):
        self.c = CRefLib.load()
        arr = (ctypes.c_int * len(ports))(*ports)
        err = ctypes.create_string_buffer(256)
        self.h = self.c.cref_open(
            HOST.encode(), arr, len(ports), name.encode(), TTL_S * 1000, err, 256
        )
        if not self.h:
            raise RuntimeError(f"cref_open: {err.value.decode()}")

    def run(self, k: int) -> None:
        # One ctypes call for all k cycles: the call costs well under 1 us, spread over k.
        if self.c.cref_cycles(self.h, k) != 0:
            raise NotAcquired(f"cref: {self.c.cref_error(self.h).decode()}")

    def close(self) -> None:
        if self.h:
            self.c.cref_close(self.h)
            self.h = None


class PotteryCycler(Cycler):
    lib = "pottery"

    def __init__(self, ports, name: str):
        import pottery
        from redis import Redis

        self.clients = [Redis(host=HOST, port=p) for p in ports]
        self.lock = pottery.Redlock(key=name, masters=set(self.clients), auto_release_time=TTL_S)

    def run(self, k: int) -> None:
        lock = self.lock
        for _ in range(k):
            if not lock.acquire(blocking=False):
                raise NotAcquired("pottery")
            lock.release()

    def close(self) -> None:
        for c in self.clients:
            c.close()


class RedlockPyCycler(Cycler):
    lib = "redlock-py"

    def __init__(self, ports, name: str):
        import redlock

        if not hasattr(redlock, "MultipleRedlockException"):
            raise RuntimeError(
                "`import redlock` is not redlock-py (redlock-ng installs the same package name; "
                "keep it out of this venv)"
            )
        self.rl = redlock.Redlock([{"host": HOST, "port": p} for p in ports], retry_count=1)
        self.name = name

    def run(self, k: int) -> None:
        rl, name, ttl_ms = self.rl, self.name, TTL_S * 1000
        for _ in range(k):
            lock = rl.lock(name, ttl_ms)
            if not lock:
                raise NotAcquired("redlock-py")
            rl.unlock(lock)

    def close(self) -> None:
        for server in self.rl.servers:
            server.close()


class RedisPyCycler(Cycler):
    lib = "redis-py"

    def __init__(self, ports, name: str, tls_ca: str | None = None):
        from redis import Redis

        (port,) = ports
        if tls_ca is None:
            self.client = Redis(host=HOST, port=port)
        else:
            self.client = Redis(host=HOST, port=port, ssl=True, ssl_ca_certs=tls_ca)
        self.lock = self.client.lock(name, timeout=TTL_S)

    def run(self, k: int) -> None:
        lock = self.lock
        for _ in range(k):
            if not lock.acquire(blocking=False):
                raise NotAcquired("redis-py")
            lock.release()

    def close(self) -> None:
        self.client.close()


class PythonRedisLockCycler(Cycler):
    lib = "python-redis-lock"

    def __init__(self, ports, name: str):
        import redis_lock
        from redis import StrictRedis

        (port,) = ports
        self.client = StrictRedis(host=HOST, port=port)
        self.lock = redis_lock.Lock(self.client, name, expire=TTL_S)

    def run(self, k: int) -> None:
        lock = self.lock
        for _ in range(k):
            if not lock.acquire(blocking=False):
                raise NotAcquired("python-redis-lock")
            lock.release()

    def close(self) -> None:
        self.client.close()


# hiredlock's rows with a fresh lock() per cycle, by their engine
FRESH_LIBS = {"fresh-native": "native", "fresh-python": "python"}


def open_cycle(lib: str, ports, name: str, tls_ca: str | None = None) -> Cycler:
    """lib's cycler on those ports; with tls_ca, over TLS (the ports are TLS ports whose
    certificates that CA file signed: hiredlock's engines and redis-py only)."""
    if lib in ("native", "python"):
        return HiredlockCycler(lib, ports, name, tls_ca)
    if lib in FRESH_LIBS:  # (a new lock object per cycle: instructions only)
        return HiredlockCycler(FRESH_LIBS[lib], ports, name, tls_ca, fresh=True)
    if tls_ca is not None:
        if lib != "redis-py":
            raise ValueError(f"{lib}: no TLS row")
        return RedisPyCycler(ports, name, tls_ca)
    factory = {
        "cref": CRefCycler,
        "pottery": PotteryCycler,
        "redlock-py": RedlockPyCycler,
        "redis-py": RedisPyCycler,
        "python-redis-lock": PythonRedisLockCycler,
    }[lib]
    return factory(ports, name)
