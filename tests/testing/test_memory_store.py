"""MemoryStore gives the replies a real redis-server gives: the same command sequences (every
script of hiredlock._core.scripts, expiry, script cache, errors) run on both and are compared.

The store's clock is the wall clock here (as the server's), so expiry lines up; replies derived
from a pttl are compared within a tolerance, error replies by their code (the first word: the
rest of a script error's text differs between Redis versions).
"""

from __future__ import annotations

import socket
import time

import pytest

from hiredlock._core import scripts as S
from hiredlock._core.keys import NameKeys
from hiredlock._engines.resp import NOT_READY, Reader, ReplyError, pack_command
from hiredlock.testing import MemoryStore

TOLERANCE_MS = 40  # a pttl read on the server and in the store, a few ms apart


class _Server:
    """A raw RESP connection: the replies exactly as the server sends them."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.reader = Reader()

    def execute(self, args):
        self.sock.sendall(pack_command([_b(arg) for arg in args]))
        while True:
            reply = self.reader.get()
            if reply is not NOT_READY:
                return reply
            self.reader.feed(self.sock.recv(65536))

    def close(self) -> None:
        self.sock.close()


def _b(arg) -> bytes:
    return arg if isinstance(arg, bytes) else str(arg).encode()


def _now_ms() -> int:
    return int(time.time() * 1000)


def _same(memory, real, approx: bool) -> bool:
    if isinstance(real, ReplyError) or isinstance(memory, ReplyError):
        return (
            isinstance(real, ReplyError)
            and isinstance(memory, ReplyError)
            and real.text.split()[0] == memory.text.split()[0]
        )
    if approx and isinstance(real, int) and isinstance(memory, int):
        return abs(real - memory) <= TOLERANCE_MS * 4  # (INSPECT packs the pttl times 4)
    if isinstance(real, list) and isinstance(memory, list):
        return len(real) == len(memory) and all(_same(m, r, approx) for m, r in zip(memory, real))
    if isinstance(real, bytes) and isinstance(memory, bytes):
        return bytes(real) == bytes(memory)  # (a status reply in the store is a bytes subclass)
    return type(real) is type(memory) and real == memory


def evalsha(script, keys, *argv):
    return ("EVALSHA", script.sha, len(keys), *keys, *argv)


def eval_(script, keys, *argv):
    return ("EVAL", script.source, len(keys), *keys, *argv)


# Each step: a command (a tuple), ("~", command) for a reply derived from a pttl, or a number of
# seconds to sleep (on both sides alike: expiry).
K, F = "lock", NameKeys(b"", b"lock").fence
KC = NameKeys(b"", b"lock").channel  # (where K's releases are announced)
RW = NameKeys(b"", b"rw").rw
RWC = NameKeys(b"", b"rw").rw_channel
Q, E = NameKeys(b"", b"fair").fair
FC = NameKeys(b"", b"fair").channel
FAIR = ("fair", Q, E)
PERMITS = [NameKeys(b"", b"sem").permit(i) for i in range(3)]

SEQUENCES = {
    "set_release_extend": [
        ("SET", K, "t1", "NX", "PX", 5000),
        ("SET", K, "t2", "NX", "PX", 5000),
        ("GET", K),
        ("~", ("PTTL", K)),
        eval_(S.RELEASE, [K], "t2", KC),
        eval_(S.EXTEND, [K], "t2", 9000),
        eval_(S.EXTEND, [K], "t1", 9000),
        ("~", ("PTTL", K)),
        evalsha(S.RELEASE, [K], "t1", KC),
        ("GET", K),
        evalsha(S.EXTEND, [K], "t1", 9000),
        ("EXISTS", K),
    ],
    "release_after_failure": [
        eval_(S.RELEASE_AFTER_FAILURE, [K], "t1", KC),
        ("SET", K, "t2", "NX", "PX", 3000),
        ("~", eval_(S.RELEASE_AFTER_FAILURE, [K], "t1", KC)),
        ("SET", "plain", "x"),
        eval_(S.RELEASE_AFTER_FAILURE, ["plain"], "t1", KC),
        eval_(S.RELEASE_AFTER_FAILURE, [K], "t2", KC),
        ("EXISTS", K),
    ],
    "fencing": [
        eval_(S.ACQUIRE_FENCED, [K, F], "t1", 5000),
        eval_(S.ACQUIRE_FENCED, [K, F], "t2", 5000),
        eval_(S.RELEASE, [K], "t1", KC),
        eval_(S.ACQUIRE_FENCED, [K, F], "t2", 5000),
        ("GET", F),
        eval_(S.RAISE_FENCE, [F], 10),
        ("GET", F),
        eval_(S.RAISE_FENCE, [F], 5),
        ("GET", F),
        ("PTTL", F),
        eval_(S.DELETE_KEY, [F]),
        eval_(S.DELETE_KEY, [F]),
        ("GET", F),
    ],
    "inspect": [
        eval_(S.INSPECT, [K], "t1"),
        ("SET", K, "t1", "NX", "PX", 4000),
        ("~", eval_(S.INSPECT, [K], "t1")),
        ("~", eval_(S.INSPECT, [K], "t2")),
        ("SET", "plain", "x"),
        eval_(S.INSPECT, ["plain"], "x"),
        ("ZADD", "z", 1, "m"),
        eval_(S.INSPECT, ["z"], "m"),
        eval_(S.PING, [], "x"),
        ("TYPE", "z"),
        ("TYPE", "plain"),
        ("TYPE", "none"),
    ],
    "semaphore": [
        eval_(S.ACQUIRE_FIRST_FREE, PERMITS, "t1", 5000),
        eval_(S.ACQUIRE_FIRST_FREE, PERMITS, "t2", 5000),
        eval_(S.ACQUIRE_FIRST_FREE, PERMITS, "t3", 5000),
        eval_(S.ACQUIRE_FIRST_FREE, PERMITS, "t4", 5000),
        eval_(S.RELEASE, [PERMITS[1]], "t2", KC),
        eval_(S.ACQUIRE_FIRST_FREE, PERMITS, "t4", 5000),
        ("GET", PERMITS[1]),
    ],
    "read_write": [
        eval_(S.READ_ACQUIRE, RW, "r1", 5000, 2000, 50),
        eval_(S.READ_ACQUIRE, RW, "r2", 5000, 2000, 50),
        eval_(S.WRITE_ACQUIRE, RW, "w1", 5000, 2000, 50),
        eval_(S.READ_ACQUIRE, RW, "r3", 5000, 2000, 50),
        eval_(S.READ_EXTEND, RW, "r1", 8000),
        eval_(S.READ_EXTEND, RW, "rx", 8000),
        eval_(S.INSPECT_KINDS, (RW[0], RW[1], Q, E)),
        eval_(S.READ_RELEASE, RW, "r1", 5000, 2000, 50, RWC),
        eval_(S.READ_RELEASE, RW, "r1", 5000, 2000, 50, RWC),
        eval_(S.READ_UNDO, RW, "r2", 5000, 2000, 50, RWC, "1"),
        ("EXISTS", *RW),
        eval_(S.WRITE_ACQUIRE, RW, "w1", 5000, 2000, 50),
        eval_(S.READ_ACQUIRE, RW, "r3", 5000, 2000, 50),
        eval_(S.INSPECT_KINDS, (RW[0], RW[1], Q, E)),
        eval_(S.WRITE_RELEASE, RW, "w2", 5000, 2000, 50, RWC),
        eval_(S.WRITE_RELEASE, RW, "w1", 5000, 2000, 50, RWC),
        ("EXISTS", RW[4]),
        ("EXISTS", RW[3]),
        eval_(S.READ_ACQUIRE, RW, "r3", 5000, 2000, 50),
        eval_(S.WRITE_ACQUIRE, RW, "w2", 5000, 2000, 50),
        eval_(S.WRITE_UNDO, RW, "w2", 5000, 2000, 50, RWC, "0"),
        eval_(S.WRITE_UNDO, RW, "w2", 5000, 2000, 50, RWC, "1"),
        ("EXISTS", *RW),
    ],
    "fair": [
        eval_(S.FAIR_ACQUIRE, FAIR, "t1", 5000, "k1", 1, 3000),
        eval_(S.FAIR_ACQUIRE, FAIR, "t2", 5000, "k2", 2, 3000),
        ("ZRANGE", Q, 0, -1),
        ("~", eval_(S.FAIR_UNDO, FAIR, "t2", 5000, "k2", 2, 3000, FC)),
        eval_(S.INSPECT_KINDS, (RW[0], RW[1], Q, E)),
        eval_(S.FAIR_RELEASE, FAIR, "t1", "k1", FC),
        eval_(S.FAIR_UNDO, FAIR, "t2", 5000, "k2", 2, 3000, FC),
        eval_(S.FAIR_ACQUIRE, FAIR, "t2", 5000, "k2", 2, 3000),
        eval_(S.FAIR_UNDO, FAIR, "t2", 5000, "k2", 2, 3000, FC),
        eval_(S.FAIR_RELEASE, FAIR, "", "k2", FC),
        ("EXISTS", K, Q, E, "fair"),
    ],
    "expiry": [
        ("SET", K, "t1", "NX", "PX", 80),
        eval_(S.READ_ACQUIRE, RW, "r1", 80, 80, 10),
        eval_(S.FAIR_ACQUIRE, FAIR, "t1", 80, "k1", 1, 80),
        ("SET", "long", "x", "PX", 60000),
        0.3,
        ("GET", K),
        ("EXISTS", *RW),
        ("EXISTS", Q, E, "fair"),
        ("SET", K, "t2", "NX", "PX", 80),
        eval_(S.INSPECT_KINDS, (RW[0], RW[1], Q, E)),
        ("PEXPIRE", "long", 50),
        ("PEXPIRE", "missing", 50),
        0.2,
        ("EXISTS", "long"),
        ("PEXPIRE", K, 0),
        ("EXISTS", K),
    ],
    "script_cache": [
        ("EVALSHA", S.RELEASE.sha, 1, K, "t"),
        ("SCRIPT", "LOAD", S.RELEASE.source),
        ("SCRIPT", "EXISTS", S.RELEASE.sha, S.EXTEND.sha),
        ("EVALSHA", S.RELEASE.sha, 1, K, "t"),
        ("SCRIPT", "FLUSH"),
        ("EVALSHA", S.RELEASE.sha, 1, K, "t"),
        ("EVAL", "return redis.call('ping')", 0),
        ("PING",),
        ("PUBLISH", b"hiredlock:released:x", b""),
    ],
    "conversions_and_errors": [
        ("EVAL", "return {1, 2.9, 'a', false, 'b', {ok='fine'}, true}", 0),
        ("EVAL", "return {1, nil, 3}", 0),
        ("EVAL", "return redis.status_reply('up')", 0),
        ("EVAL", "return redis.error_reply('MINE went wrong')", 0),
        ("EVAL", "return redis.pcall('incr', KEYS[1])", 1, "counter"),
        ("EVAL", "return -3.7", 0),
        ("EVAL", "return 'x' .. nil", 0),
        ("EVAL", "return redis.call('set', KEYS[1], 'v')", 1, "s"),
        ("ZADD", "z", 1, "a"),
        ("GET", "z"),
        ("EVAL", "return redis.call('get', KEYS[1])", 1, "z"),
        ("INCR", "s"),
        ("INCR", "n"),
        ("INCR", "n"),
        ("EVAL", "return redis.call('time')[1] > '0'", 0),
        ("EVAL", "syntax error here", 0),
        ("EVALSHA", "0" * 40, 0),
        ("EVAL", "return 1", 2, "a"),
        ("ZADD", "z", "xx", 5, "a", 6, "b"),
        ("ZSCORE", "z", "a"),
        ("ZSCORE", "z", "b"),
        ("ZADD", "z", 2.5, "c", 7, "d"),
        ("ZRANGE", "z", 0, 1),
        ("ZRANGEBYSCORE", "z", "(2.5", "+inf"),
        ("ZCOUNT", "z", "-inf", "(5"),
        ("ZSCORE", "z", "c"),
        ("ZREMRANGEBYSCORE", "z", "-inf", 2.5),
        ("ZREM", "z", "a", "d"),
        ("EXISTS", "z"),
        ("SELECT", 0),
    ],
}


@pytest.mark.parametrize("sequence", sorted(SEQUENCES))
def test_memory_store_replies_as_a_real_server(redis_factory, sequence):
    (srv,) = redis_factory(1)
    server = _Server(srv.port)
    store = MemoryStore()
    try:
        for number, step in enumerate(SEQUENCES[sequence]):
            if isinstance(step, float):
                time.sleep(step)
                continue
            approx = step[0] == "~"
            command = step[1] if approx else step
            args = [_b(arg) for arg in command]
            real = server.execute(args)
            memory = store.execute(args, _now_ms())
            assert _same(memory, real, approx), (
                f"step {number} {command[:3]}: memory {memory!r}, server {real!r}"
            )
    finally:
        server.close()


def test_memory_store_publishes_releases_to_its_listener():
    store = MemoryStore()
    heard = []
    store.on_publish = lambda channel, message: heard.append((channel, message)) or 1
    store.execute([b"SET", b"k", b"t", b"NX", b"PX", b"1000"], 0)
    channel = NameKeys(b"", b"k").channel
    assert store.execute([b"EVAL", S.RELEASE.source, b"1", b"k", b"t", channel], 10) == 1
    assert heard == [(channel, b"")]


def test_memory_store_expires_keys_by_the_time_it_is_given():
    store = MemoryStore()
    assert store.execute([b"SET", b"k", b"t", b"NX", b"PX", b"1000"], 5000) == b"OK"
    assert store.execute([b"PTTL", b"k"], 5400) == 600
    assert store.execute([b"GET", b"k"], 5999) == b"t"
    assert store.execute([b"GET", b"k"], 6000) is None
    assert store.keys(6000) == []
