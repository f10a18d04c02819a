"""Small helpers shared by the test modules."""

from __future__ import annotations

import json
import os
import re
import select
import signal
import socket
import threading
import time
import traceback
from typing import Any, Callable

import pytest

TOKEN_RE = re.compile(r"\A[0-9a-f]{40}\Z")
FOREIGN = b"foreign-holder-value"

# This folder: the worker scripts that tests run as subprocesses are here.
SUPPORT_DIR = os.path.dirname(os.path.abspath(__file__))

# Extra seconds added to every upper time bound, for loaded CI machines (default 0).
EXTRA_SLACK = float(os.environ.get("HIREDLOCK_TEST_EXTRA_SLACK", "0") or 0)


def no_extensions() -> bool:
    """HIREDLOCK_NO_EXTENSIONS=1: the package was built without its native engine on purpose."""
    return os.environ.get("HIREDLOCK_NO_EXTENSIONS", "").strip().lower() in {
        "1",
        "true",
        "yes",
        "on",
    }


def urls(servers):
    return [s.url for s in servers]


def kb(key) -> bytes:
    return key.encode() if isinstance(key, str) else bytes(key)


def braced(name) -> bytes:
    """What follows the kind in every internal key and channel of a name without braces and
    without a namespace (docs/keys.md): the name in braces, its hash tag."""
    raw = kb(name)
    assert b"{" not in raw and b"}" not in raw, raw
    return b"{" + raw + b"}"


def values(servers, key):
    """GET key on every server (callers pass live, running servers only)."""
    return [s.admin().get(key) for s in servers]


# Commands the library sent but did not wait for (masters beyond the quorum, fire-and-forget
# unlocks) may still be in flight on another connection when an assertion's command arrives.
# State checks on the masters therefore poll for up to EVENTUAL seconds before failing.
EVENTUAL = 1.0


def assert_no_key(servers, key, msg="", timeout=EVENTUAL):
    deadline = time.monotonic() + timeout
    while True:
        vals = values(servers, key)
        if all(v is None for v in vals):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"key {key!r} still present {msg}: {vals}")
        time.sleep(0.002)


def open_connections(rl):
    """Opens every master's connection, TLS handshakes included (inspect() waits for every
    master). An acquire's round ends once a quorum said OK, and a master whose connection opened
    in that round and completed after it gets no SET from it (the engines queue nothing on a
    connection still connecting): tests that check a key on every master open them first."""
    rl.inspect("hiredlock-tests:open-connections")


def assert_values(servers, key, expected, msg="", timeout=EVENTUAL):
    """Every server ends up holding `expected` (str tokens are compared as ascii bytes)."""
    if isinstance(expected, str):
        expected = expected.encode()
    deadline = time.monotonic() + timeout
    while True:
        vals = values(servers, key)
        if all(v == expected for v in vals):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"key {key!r}: expected {expected!r} everywhere {msg}, got {vals}")
        time.sleep(0.002)


def assert_held_on_quorum(servers, key, token, msg="", timeout=EVENTUAL):
    """`token` on a quorum of the servers and no other value on the rest (str tokens are compared
    as ascii bytes). A waiter that tries again the moment one master announces a release can reach
    another master before the release does: that master says TAKEN, the lock is held on the others
    (as Redlock allows), and the release leaves that master empty."""
    if isinstance(token, str):
        token = token.encode()
    quorum = len(servers) // 2 + 1
    deadline = time.monotonic() + timeout
    while True:
        vals = values(servers, key)
        if vals.count(token) >= quorum and all(v in (None, token) for v in vals):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"key {key!r}: expected {token!r} on a quorum {msg}, got {vals}")
        time.sleep(0.002)


def assert_pttl_between(servers, key, lo, hi, msg="", timeout=EVENTUAL):
    deadline = time.monotonic() + timeout
    while True:
        vals = [s.admin().pttl(key) for s in servers]
        if all(lo < v <= hi for v in vals):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"key {key!r}: PTTL not in ({lo}, {hi}] {msg}: {vals}")
        time.sleep(0.002)


def set_foreign(servers, key, px=60000, value=FOREIGN):
    for s in servers:
        assert s.admin().set(key, value, px=px)


def assert_foreign_intact(servers, key, px=60000, value=FOREIGN, tolerance_ms=5000):
    for s in servers:
        a = s.admin()
        assert a.get(key) == value, f"foreign value on port {s.port} changed: {a.get(key)!r}"
        pttl = a.pttl(key)
        assert px - tolerance_ms < pttl <= px, f"foreign PTTL on port {s.port} changed: {pttl}"


def attempt(lock, **kw):
    """acquire(); returns True, False, or the LockNotAcquired instance it raised."""
    from hiredlock import LockNotAcquired

    try:
        return lock.acquire(**kw)
    except LockNotAcquired as exc:
        return exc


class InThread:
    """fn() in a thread of its own (a task of its own on the async API, through the facade):
    what it returned or raised."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self.thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self.value = fn()
        except BaseException as exc:
            self.error = exc
        finally:
            self.done.set()

    def result(self, timeout: float = 60) -> Any:
        assert self.done.wait(timeout), f"the thread did not finish within {timeout} s"
        self.thread.join()
        if self.error is not None:
            raise self.error
        return self.value


def wait_until(pred, timeout, what):
    """Poll a condition that has no event to wait on (server-side state), with a deadline."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for: {what}")
        time.sleep(0.005)


def vote_for(votes, server):
    """The vote of a given server (matched by host:port in Vote.master)."""
    pat = re.compile(rf":{server.port}(?!\d)")
    hits = [v for v in votes if pat.search(v.master)]
    assert len(hits) == 1, f"expected one vote for port {server.port}, got {votes}"
    return hits[0]


def debug_sleep(servers, seconds):
    """Make each server sleep (DEBUG SLEEP, sent on a raw socket) and return only once all of them
    are provably blocked: a PING sent on another connection gets no answer within 20 ms.
    Returns the sockets; close them afterwards."""
    arg = str(seconds).encode()
    cmd = b"*3\r\n$5\r\nDEBUG\r\n$5\r\nSLEEP\r\n$%d\r\n%s\r\n" % (len(arg), arg)
    socks = []
    for s in servers:
        s1 = socket.create_connection(("127.0.0.1", s.port))
        s1.sendall(cmd)
        socks.append(s1)
    for s in servers:
        s2 = socket.create_connection(("127.0.0.1", s.port))
        socks.append(s2)
        s2.sendall(b"*1\r\n$4\r\nPING\r\n")
        s2.settimeout(0.02)
        try:
            data = s2.recv(64)
        except (TimeoutError, socket.timeout):
            continue  # blocked: the sleep is running
        raise AssertionError(f"DEBUG SLEEP did not block port {s.port} (got {data!r})")
    return socks


def in_child(fn, timeout: float = 30.0):
    """Runs fn() in a forked child; returns what it returned (JSON), or fails: the child raised,
    or did not finish within `timeout` (a deadlock: it is killed)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            os.close(read_fd)
            try:
                out = {"ok": True, "value": fn()}
            except BaseException as exc:
                out = {"ok": False, "error": f"{exc!r}\n{traceback.format_exc()}"}
            os.write(write_fd, json.dumps(out).encode())
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(write_fd)
    deadline = time.monotonic() + timeout
    chunks = []
    while True:  # the pipe reaches its end when the child exits (or closes it)
        ready, _, _ = select.select([read_fd], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os.close(read_fd)
            raise AssertionError(f"the forked child hung for {timeout} s (a deadlock)")
        data = os.read(read_fd, 1 << 16)
        if not data:
            break
        chunks.append(data)
    os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    out = json.loads(b"".join(chunks))
    assert out["ok"], out["error"]
    return out["value"]


def attempt_votes(rl, name, ttl=10):
    """One non-blocking acquire (released again when it got the lock): (got, [(outcome,
    detail) of each vote]). A lock keeps the votes of a refused attempt only: a lock taken has
    [] (every master that matters voted OK)."""
    from hiredlock import QuorumUnreachable

    lock = rl.lock(name, ttl)
    try:
        got = lock.acquire(blocking=False)
    except QuorumUnreachable as exc:
        return False, [(vote.outcome, vote.detail) for vote in exc.votes]
    votes = [(vote.outcome, vote.detail) for vote in lock.last_votes]
    if got:
        lock.release()
    return got, votes


# -- one quorum case (tests/api/test_quorum.py; over TLS: tests/engine/test_tls.py) ----------------


def check_quorum_mask(
    make_redlock, masters, addresses, key, taken_mask, down_mask=0, open_first=False
):
    """One mask: the masters whose bit is set in `taken_mask` hold a foreign value, those in
    `down_mask` are killed (the two never overlap); the client names the masters `addresses`
    (URLs, dicts, ...).  A non-blocking acquire succeeds iff a quorum is free; it raises
    QuorumUnreachable iff so many are down that no quorum could answer, and returns False
    otherwise.  Returns the attempt's votes (one per master, in order).  open_first: the
    client's connections are opened before the acquire (support.open_connections: for TLS
    masters, whose handshakes may end after the acquire's round)."""
    from hiredlock import QuorumUnreachable

    assert not taken_mask & down_mask
    n = len(masters)
    taken = [m for i, m in enumerate(masters) if taken_mask >> i & 1]
    down = [m for i, m in enumerate(masters) if down_mask >> i & 1]
    free = [m for i, m in enumerate(masters) if not (taken_mask | down_mask) >> i & 1]
    set_foreign(taken, key)
    for m in down:
        m.kill()

    rl = make_redlock(addresses, retry_count=1, retry_delay=0.01)
    if open_first:
        open_connections(rl)  # (the killed masters' connects fail, as the acquire's would)
    assert rl.quorum == n // 2 + 1
    lock = rl.lock(key, 10)
    unreachable = len(down) > n - rl.quorum
    if unreachable:
        with pytest.raises(QuorumUnreachable) as caught:
            lock.acquire(blocking=False)
        got, votes = False, caught.value.votes
    else:
        got = lock.acquire(blocking=False)
        votes = lock.last_votes

    should = len(free) >= n // 2 + 1
    assert got is should, f"acquire() returned {got!r} with {len(free)} free of {n}"
    assert_foreign_intact(taken, key)
    if got:
        assert lock.held
        assert TOKEN_RE.match(lock.token), lock.token
        assert_values(free, key, lock.token)
        assert 0 < lock.validity <= 10
        lock.release()
        assert not lock.held
        assert lock.validity == 0.0
    else:
        assert not lock.held
        assert lock.validity == 0.0
        # A failed attempt unlocks every master: the free ones hold nothing of ours.
    assert_no_key(free, key, "after " + ("release" if got else "failed acquire"))
    assert_foreign_intact(taken, key)
    return votes


# A password that must never show (tests/api/test_redaction.py, tests/engine/test_tls.py).
SECRET = "Sekrit-42"


def assert_hidden(text: str, *secrets: str) -> None:
    for secret in secrets or (SECRET,):
        assert secret not in text, f"{secret!r} shows in: {text}"
