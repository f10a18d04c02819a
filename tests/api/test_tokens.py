"""Tokens are 40 lowercase hex chars, unique over 100,000 acquisitions, differ between
a parent and its forked children; a forked child never talks on its parent's sockets."""

from __future__ import annotations

import json
import os
import re
import select
import socket
import time
import uuid

import pytest
from apis import make_redlock_fixture, pytest_generate_tests, sync_only  # noqa: F401  (both APIs)
from support import TOKEN_RE, assert_no_key, assert_values, urls

N_TOKENS = 100_000


@pytest.mark.slow
@sync_only("the tokens come from the engine, which both APIs share: 100k once is enough")
def test_tokens_unique_100k(engine, make_redlock, masters5, capsys):
    """100,000 acquisitions (distinct names, not released: one round trip each) on one master."""
    m = masters5[0]
    rl = make_redlock([m.url])
    prefix = f"tok:{uuid.uuid4().hex[:6]}:"
    tokens = set()
    sample = {}
    t0 = time.monotonic()
    for i in range(N_TOKENS):
        lk = rl.lock(prefix + str(i), 60)
        # blocking: one 50 ms stall of a loaded machine in 100k round trips is retried, not fatal
        assert lk.acquire(timeout=5), i
        tok = lk.token
        tokens.add(tok)
        if i % 1000 == 0:
            sample[prefix + str(i)] = tok
    elapsed = time.monotonic() - t0
    with capsys.disabled():
        print(
            f"\n[{engine}] {N_TOKENS} acquisitions on 1 master: {elapsed:.2f}s "
            f"({elapsed / N_TOKENS * 1e6:.1f} us each)"
        )
    assert len(tokens) == N_TOKENS
    assert all(TOKEN_RE.match(t) for t in tokens), [t for t in tokens if not TOKEN_RE.match(t)][:3]
    # the value stored in Redis is the hex string itself (ascii bytes)
    a = m.admin()
    for name, tok in sample.items():
        assert a.get(name) == tok.encode()
    assert a.dbsize() == N_TOKENS


def test_token_format_and_storage(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5))
    seen = set()
    for i in range(200):
        lk = rl.lock(f"{key}:{i % 7}", 5)
        assert lk.token is None
        assert lk.acquire(blocking=False)
        tok = lk.token
        assert isinstance(tok, str) and TOKEN_RE.match(tok), tok
        assert tok not in seen
        seen.add(tok)
        if i % 50 == 0:
            assert_values(masters5, lk.key, tok)
        lk.release()
    for i in range(7):
        assert_no_key(masters5, f"{key}:{i}")


# -- fork ------------------------------------------------------------------------------------


def _run_child(fn):
    """fork(); the child runs fn() -> JSON-able, writes it to a pipe and _exits.  Returns
    (pid, read_fd, go_write_fd): the child starts fn() only after the parent writes to go."""
    r, w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.close(r)
            os.close(go_w)
            ready, _, _ = select.select([go_r], [], [], 20)
            if not ready:
                raise RuntimeError("parent never said go")
            os.read(go_r, 1)
            try:
                out = {"ok": True, "value": fn()}
            except BaseException as exc:  # report anything to the parent
                import traceback

                out = {"ok": False, "error": f"{exc!r}\n{traceback.format_exc()}"}
            os.write(w, json.dumps(out).encode())
        except BaseException:
            code = 1
        finally:
            os._exit(code)
    os.close(w)
    os.close(go_r)
    return pid, r, go_w


def _collect(pid, r, timeout=20):
    chunks = []
    deadline = time.monotonic() + timeout
    while True:
        ready, _, _ = select.select([r], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            os.close(r)
            raise AssertionError("forked child did not answer in time")
        data = os.read(r, 65536)
        if not data:
            break
        chunks.append(data)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    out = json.loads(b"".join(chunks) or b"null")
    assert out and out["ok"], out
    return out["value"]


def _child_acquire(rl, name):
    def fn():
        lk = rl.lock(name, 5)
        assert lk.acquire(blocking=False)
        tok = lk.token
        lk.release()
        return tok

    return fn


@pytest.mark.fork
@sync_only("fork() of a process whose asyncio loop runs in another thread")
def test_fork_tokens_differ(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5[:3]))
    first = rl.lock(key + ":parent", 5)
    assert first.acquire(blocking=False)  # parent has connections and has drawn randomness
    tokens = [first.token]
    for j in range(5):
        pid, r, go = _run_child(_child_acquire(rl, f"{key}:child{j}"))
        os.write(go, b"g")
        os.close(go)
        # the parent draws its next token while the child draws its first one
        lk = rl.lock(f"{key}:parent{j}", 5)
        assert lk.acquire(blocking=False)
        tokens.append(lk.token)
        lk.release()
        child_tok = _collect(pid, r)
        assert TOKEN_RE.match(child_tok), child_tok
        tokens.append(child_tok)
    assert len(set(tokens)) == len(tokens), tokens
    # parent's own lock still intact and releasable
    assert_values(masters5[:3], first.key, first.token)
    first.release()
    for j in range(5):
        assert_no_key(masters5[:3], f"{key}:child{j}")


class Monitor:
    """MONITOR on a raw socket: every command the server executes, with the client address."""

    LINE = re.compile(rb"^\+\d+\.\d+ \[\d+ ([^\]]+)\] (.*)$")

    def __init__(self, server):
        self.server = server
        self.sock = socket.create_connection(("127.0.0.1", server.port))
        self.sock.sendall(b"*1\r\n$7\r\nMONITOR\r\n")
        self.buf = b""
        assert self._line(5) == b"+OK"

    def _line(self, timeout):
        deadline = time.monotonic() + timeout
        while b"\r\n" not in self.buf:
            self.sock.settimeout(max(0.001, deadline - time.monotonic()))
            data = self.sock.recv(65536)
            assert data, "MONITOR connection closed"
            self.buf += data
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def until(self, sentinel: bytes, timeout=10):
        """(addr, rest-of-line) of every command until an ECHO of `sentinel` is seen."""
        out = []
        deadline = time.monotonic() + timeout
        while True:
            line = self._line(max(0.001, deadline - time.monotonic()))
            mo = self.LINE.match(line)
            assert mo, line
            addr, rest = mo.group(1).decode(), mo.group(2)
            if rest.lower().startswith(b'"echo"') and sentinel in rest:
                return out
            out.append((addr, rest))

    def close(self):
        self.sock.close()


def _lib_addrs(server):
    return {c["addr"] for c in server.foreign_clients()}


@pytest.mark.fork
@sync_only("fork() of a process whose asyncio loop runs in another thread")
def test_fork_child_uses_its_own_connection(engine, make_redlock, masters5, key):
    """Sound check: MONITOR reports, for each command, the client address (ip:port) of the TCP
    connection that sent it.  Every connection the parent had before fork() is listed by CLIENT
    LIST; the child's SET and release script must come from an address not in that list, i.e. a
    connection the child opened itself.  The parent's connections must survive the child (no
    shutdown/QUIT on the shared socket), and the parent keeps working."""
    m = masters5[0]
    rl = make_redlock([m.url])
    warm = rl.lock(key + ":warm", 5)
    assert warm.acquire(blocking=False)
    warm.release()
    held = rl.lock(key + ":held", 30)
    assert held.acquire(blocking=False)  # a lock held across the fork
    pre = _lib_addrs(m)
    assert pre, "the parent has no connection to the master after an acquire?"
    child_name = f"forkchild-{uuid.uuid4().hex[:8]}"
    parent_name = f"forkparent-{uuid.uuid4().hex[:8]}"

    pid, r, go = _run_child(_child_acquire(rl, child_name))
    mon = Monitor(m)
    try:
        os.write(go, b"g")
        os.close(go)
        child_tok = _collect(pid, r)
        sentinel1 = uuid.uuid4().hex.encode()
        m.admin().echo(sentinel1)
        child_cmds = [(a, rest) for a, rest in mon.until(sentinel1) if child_name.encode() in rest]

        # parent works after the child is gone, on the connections it had
        assert pre <= _lib_addrs(m), "the child closed the parent's connection(s)"
        lk = rl.lock(parent_name, 5)
        assert lk.acquire(blocking=False)
        lk.release()
        held.extend()
        held.release()
        sentinel2 = uuid.uuid4().hex.encode()
        m.admin().echo(sentinel2)
        parent_cmds = [
            (a, rest) for a, rest in mon.until(sentinel2) if parent_name.encode() in rest
        ]
    finally:
        mon.close()

    assert TOKEN_RE.match(child_tok)
    assert any(rest.upper().startswith(b'"SET"') for _, rest in child_cmds), child_cmds
    assert len(child_cmds) >= 2, child_cmds  # SET + release script (EVALSHA and/or EVAL)
    for addr, rest in child_cmds:
        if addr == "lua":
            continue
        assert addr not in pre, f"forked child sent {rest[:60]!r} on the parent's connection {addr}"
    parent_addrs = {a for a, _ in parent_cmds if a != "lua"}
    assert parent_addrs, parent_cmds
    assert parent_addrs <= pre, (parent_addrs, pre)
    assert_no_key([m], child_name)
    assert_no_key([m], parent_name)
    assert_no_key([m], key + ":held")


@pytest.mark.fork
@sync_only("fork() of a process whose asyncio loop runs in another thread")
def test_fork_child_with_unused_redlock(engine, make_redlock, masters5, key):
    """A Redlock created (but never connected) before fork works in both processes."""
    rl = make_redlock(urls(masters5[:3]))
    pid, r, go = _run_child(_child_acquire(rl, key + ":c"))
    os.write(go, b"g")
    os.close(go)
    lk = rl.lock(key + ":p", 5)
    assert lk.acquire(blocking=False)
    lk.release()
    assert TOKEN_RE.match(_collect(pid, r))
    assert_no_key(masters5[:3], key + ":c")
    assert_no_key(masters5[:3], key + ":p")
