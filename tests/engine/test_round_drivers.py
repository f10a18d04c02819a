"""Both engines' event-fed rounds (begin(request) -> round, finish(round)) driven by
the asyncio driver (hiredlock.aio._driver), real servers: the same votes as the blocking path, the
engine held until its round ends, a stopped master's timeout, cancellation at any point never
desynchronising the engine nor leaving the loop with a registration, many rounds at once on one
loop, and a master dying mid-round."""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import time

import pytest

from hiredlock._core.masters import parse_masters
from hiredlock._core.requests import RunScript, SetNx
from hiredlock._core.scripts import EXTEND, RELEASE, Outcome
from hiredlock._engines.python_engine import PythonEngine
from hiredlock._engines.selection import engine_class
from hiredlock.aio._driver import drive

OK = int(Outcome.OK)
TAKEN = int(Outcome.TAKEN)
TIMEOUT = int(Outcome.TIMEOUT)
SKIPPED = int(Outcome.SKIPPED)

TTL_MS = 10_000
TIMEOUT_MS = 500.0
FOREIGN = b"f" * 40
MINE = b"m" * 40


def new_engine(engine: str, servers):
    return engine_class(engine)(parse_masters([srv.url for srv in servers]))


class Seen:
    """Every fd a round asked the loop to watch (and, on the python engine, every fd of the
    engine's connections), so that the test can check none stays registered."""

    def __init__(self) -> None:
        self.fds: set[int] = set()

    def note(self, rnd, engine=None) -> None:
        self.fds |= set(rnd.fds_wanted())
        if engine is not None:
            self.fds |= engine_fds(engine)


def engine_fds(engine) -> set[int]:
    # Only the python engine exposes its connections; the native one keeps them in C.
    if isinstance(engine, PythonEngine):
        return {master.fd for master in engine._masters if master.fd >= 0}
    return set()


async def run_round(rnd, seen=None, engine=None):
    if seen is not None:
        seen.note(rnd, engine)
    await drive(rnd)
    return rnd


async def set_nx_async(engine, keys, tokens, timeout_ms=TIMEOUT_MS, seen=None):
    rnd = engine.begin(SetNx(keys, tokens, TTL_MS, timeout_ms))
    await run_round(rnd, seen, engine)
    return engine.finish(rnd)


async def release_async(engine, keys, tokens, wait_all=True):
    argvs = [(key, token) for key, token in zip(keys, tokens)]
    rnd = engine.begin(RunScript(RELEASE.sha, RELEASE.source, 1, argvs, TIMEOUT_MS, wait_all))
    await run_round(rnd)
    return engine.finish(rnd)


def release_sync(engine, keys, tokens, wait_all=True):
    argvs = [(key, token) for key, token in zip(keys, tokens)]
    return engine.run(RunScript(RELEASE.sha, RELEASE.source, 1, argvs, TIMEOUT_MS, wait_all))


def codes_of(results) -> list[bytes]:
    return [codes for codes, _elapsed, _details, _values in results]


def hold_foreign(servers, key: bytes, on) -> None:
    for index in on:
        servers[index].admin().set(key, FOREIGN, px=TTL_MS)


def assert_unregistered(loop, fds) -> None:
    for fd in fds:
        assert not loop.remove_reader(fd), f"fd {fd} still has a reader on the loop"
        assert not loop.remove_writer(fd), f"fd {fd} still has a writer on the loop"


# Per key: the masters holding a foreign value, and the votes that gives.
LAYOUTS = {
    b"free": ([], bytes([OK] * 5)),
    b"minority": ([0, 1], bytes([TAKEN, TAKEN, OK, OK, OK])),
    b"majority": ([1, 2, 4], bytes([OK, TAKEN, TAKEN, OK, TAKEN])),
    b"everywhere": ([0, 1, 2, 3, 4], bytes([TAKEN] * 5)),
}


def test_same_votes_as_the_blocking_path(engine, masters5, key):
    keys_by_path = {
        path: [f"{key}:{path}:{name.decode()}".encode() for name in LAYOUTS]
        for path in ("sync", "async")
    }
    for keys in keys_by_path.values():
        for k, (holders, _votes) in zip(keys, LAYOUTS.values()):
            hold_foreign(masters5, k, holders)
    expected = [votes for _holders, votes in LAYOUTS.values()]
    tokens = [b"%040d" % i for i in range(len(LAYOUTS))]
    sync_engine, async_engine = new_engine(engine, masters5), new_engine(engine, masters5)
    try:
        sync_set = sync_engine.run(SetNx(keys_by_path["sync"], tokens, TTL_MS, TIMEOUT_MS))
        async_set = asyncio.run(set_nx_async(async_engine, keys_by_path["async"], tokens))
        # set_nx stops once every key is decided: masters not heard from by then are SKIPPED,
        # so only the masters both paths heard from are compared.
        for sync_codes, async_codes, want in zip(codes_of(sync_set), codes_of(async_set), expected):
            for master in range(5):
                if SKIPPED not in (sync_codes[master], async_codes[master]):
                    assert sync_codes[master] == async_codes[master] == want[master]

        sync_release = release_sync(sync_engine, keys_by_path["sync"], tokens)
        async_release = asyncio.run(release_async(async_engine, keys_by_path["async"], tokens))
        assert codes_of(sync_release) == codes_of(async_release) == expected
        # the engine is free again, for the sync path too
        assert codes_of(release_sync(async_engine, keys_by_path["async"], tokens)) == [
            bytes([TAKEN] * 5)
        ] * len(LAYOUTS)
    finally:
        sync_engine.close()
        async_engine.close()
    for k in keys_by_path["async"]:
        assert all(srv.admin().get(k) in (None, FOREIGN) for srv in masters5)


def test_a_round_holds_the_engine_until_it_ends(engine, masters5, key):
    eng = new_engine(engine, masters5[:3])
    try:
        rnd = eng.begin(SetNx([key.encode()], [MINE], TTL_MS, TIMEOUT_MS))
        # Only the native engine refuses a second round; the python one would start it and drop
        # the open round's connections (as after an exception), so it is not asked to.
        if engine == "native":
            with pytest.raises(RuntimeError):
                eng.run(SetNx([key.encode()], [MINE], TTL_MS, TIMEOUT_MS))
        asyncio.run(run_round(rnd))
        ((codes, *_),) = eng.finish(rnd)
        assert codes.count(OK) >= 2
        assert eng.finish(rnd) == [(codes, *_)]  # the same results, once ended
        assert eng.finish(eng.begin(SetNx([], [], TTL_MS, TIMEOUT_MS))) == []
        ((again, *_),) = eng.run(SetNx([key.encode()], [MINE], TTL_MS, TIMEOUT_MS))
        assert OK not in again
    finally:
        eng.close()


def test_a_stopped_master_times_out_while_the_others_answer(engine, masters5, key):
    k = key.encode()
    hold_foreign(masters5, k, [0, 1])  # 2 TAKEN + 2 OK of 5: undecided without the stopped one
    eng = new_engine(engine, masters5)
    timeout_ms = 300.0
    try:
        asyncio.run(set_nx_async(eng, [k + b":warm"], [b"w" * 40]))  # connections open
        masters5[4].stop()
        t0 = time.monotonic()
        ((codes, elapsed_ns, details, _values),) = asyncio.run(
            set_nx_async(eng, [k], [b"t" * 40], timeout_ms)
        )
        elapsed = time.monotonic() - t0
    finally:
        eng.close()
    assert codes == bytes([TAKEN, TAKEN, OK, OK, TIMEOUT]), details
    assert timeout_ms / 1000 <= elapsed < timeout_ms / 1000 + 0.25
    assert elapsed_ns / 1e9 <= elapsed


class Sleepers:
    """A raw connection per master that sends DEBUG SLEEP without waiting for it, so that the
    next round's replies come late enough for a cancellation to leave them owed."""

    def __init__(self, servers) -> None:
        self.conns = [socket.create_connection((srv.host, srv.port)) for srv in servers]
        self.unanswered = [0] * len(servers)

    def sleep(self, index: int, seconds: float) -> None:
        text = f"{seconds:g}".encode()
        self.conns[index].sendall(
            b"*3\r\n$5\r\nDEBUG\r\n$5\r\nSLEEP\r\n$%d\r\n%s\r\n" % (len(text), text)
        )
        self.unanswered[index] += 1

    def settle(self) -> None:
        for index, conn in enumerate(self.conns):
            expected = b"+OK\r\n" * self.unanswered[index]
            received = b""
            while len(received) < len(expected):
                received += conn.recv(4096)
            assert received == expected
            self.unanswered[index] = 0

    def close(self) -> None:
        for conn in self.conns:
            conn.close()


def left_owed(engine) -> bool:
    """Whether a python engine master's connection still owes replies of an abandoned round."""
    return any(None in master.owed for master in engine._masters)


async def cancelled_rounds(engine, sleepers, held, mine, key, iterations, rng) -> tuple[int, int]:
    """Cancels rounds at random points; returns how many were cancelled before finishing, and
    (python engine only) how many left replies owed."""
    loop = asyncio.get_running_loop()
    token = MINE
    n_mid_round = n_left_owed = 0
    for i in range(iterations):
        for index in rng.sample(range(5), rng.randrange(3)):
            sleepers.sleep(index, 0.002)
        # Rounds whose every reply would be an OK, were it taken for the next round's answer.
        # Begun inside the task, as an API layer does: a task cancelled before it runs has
        # begun nothing.
        if rng.random() < 0.5:
            fresh = f"{key}:{i}".encode()

            def begin(fresh=fresh):
                return engine.begin(SetNx([fresh], [token], TTL_MS, TIMEOUT_MS))

        else:
            argv = (mine, token, b"%d" % TTL_MS)

            def begin(argv=argv):
                return engine.begin(
                    RunScript(EXTEND.sha, EXTEND.source, 1, [argv], TIMEOUT_MS, True)
                )

        seen = Seen()
        begun = []

        async def one_round(begin=begin, seen=seen, begun=begun):
            begun.append(begin())
            await run_round(begun[0], seen, engine)

        task = asyncio.ensure_future(one_round())
        if rng.random() < 0.5:
            for _ in range(rng.randrange(4)):
                await asyncio.sleep(0)
        else:
            await asyncio.sleep(rng.random() * 0.002)
        n_mid_round += bool(begun) and not begun[0].finished()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        # A cancelled native round reports itself finished; a python one is ended (accounted)
        # but finished() still answers from its votes.
        if isinstance(engine, PythonEngine):
            assert all(rnd.ended_ns for rnd in begun)
        else:
            assert all(rnd.finished() for rnd in begun)
        assert_unregistered(loop, seen.fds)
        # Only the python engine exposes what its connections owe.
        if isinstance(engine, PythonEngine):
            n_left_owed += left_owed(engine)
        # Whatever the cancelled round left owed must never pass for this round's answer.
        ((codes, _elapsed, details, _values),) = await set_nx_async(
            engine, [held], [token], seen=seen
        )
        assert OK not in codes, (i, codes, details)
        assert_unregistered(loop, seen.fds | engine_fds(engine))
        sleepers.settle()
    return n_mid_round, n_left_owed


def test_cancellation_never_desynchronises_the_engine(engine, masters5, key):
    held = f"{key}:held".encode()
    mine = f"{key}:mine".encode()
    hold_foreign(masters5, held, range(5))
    for srv in masters5:
        srv.admin().set(mine, MINE, px=TTL_MS)
    eng = new_engine(engine, masters5)
    sleepers = Sleepers(masters5)
    rng = random.Random(12)
    t0 = time.monotonic()
    try:
        n_mid_round, n_left_owed = asyncio.run(
            asyncio.wait_for(
                cancelled_rounds(eng, sleepers, held, mine, key, 200, rng), timeout=120
            )
        )
        # the engine is whole for the sync path afterwards too
        ((codes, *_),) = eng.run(SetNx([held], [MINE], TTL_MS, TIMEOUT_MS))
        assert OK not in codes
    finally:
        eng.close()
        sleepers.close()
    assert time.monotonic() - t0 < 120
    assert n_mid_round >= 20, "too few cancellations came in the middle of a round"
    # Only the python engine exposes what its connections owe.
    if engine == "python":
        assert n_left_owed >= 20, "too few cancellations left replies owed"
    assert all(srv.admin().get(held) == FOREIGN for srv in masters5)


def test_a_hundred_rounds_at_once(engine, masters5, key):
    servers = masters5[:3]
    engines = [new_engine(engine, servers) for _ in range(100)]

    async def cycle(eng, index):
        k, token = f"{key}:{index}".encode(), b"%040d" % index
        ((taken, *_),) = await set_nx_async(eng, [k], [token])
        ((released, *_),) = await release_async(eng, [k], [token])
        return taken, released

    async def all_at_once():
        return await asyncio.wait_for(
            asyncio.gather(*(cycle(eng, i) for i, eng in enumerate(engines))), 60
        )

    try:
        outcomes = asyncio.run(all_at_once())
    finally:
        for eng in engines:
            eng.close()
    # set_nx stops at a quorum: the third master's vote may be SKIPPED, and if its connection
    # was still opening then, it never got the SET, so the release finds nothing there (TAKEN).
    for taken, released in outcomes:
        assert taken.count(OK) >= 2 and set(taken) <= {OK, SKIPPED}, taken
        for set_vote, release_vote in zip(taken, released):
            assert release_vote == OK if set_vote == OK else release_vote in (OK, TAKEN), (
                taken,
                released,
            )


def test_a_master_dying_mid_round_leaves_no_registration(engine, masters5, key):
    k = key.encode()
    for srv in masters5:
        srv.admin().set(k, MINE, px=TTL_MS)
    eng = new_engine(engine, masters5)

    async def release_while_one_dies():
        loop = asyncio.get_running_loop()
        await set_nx_async(eng, [k + b":warm"], [b"w" * 40])  # connections open
        masters5[4].stop()
        # wait_all: the round waits for master 4 until it answers, or its connection goes
        rnd = eng.begin(RunScript(RELEASE.sha, RELEASE.source, 1, [(k, MINE)], 2000.0, True))
        seen = Seen()
        task = asyncio.ensure_future(run_round(rnd, seen, eng))
        await asyncio.sleep(0.05)
        assert not rnd.finished()
        masters5[4].kill()  # its socket is reset: the round closes it, off the loop first
        t0 = time.monotonic()
        await asyncio.wait_for(task, 5)
        assert time.monotonic() - t0 < 1.0
        assert_unregistered(loop, seen.fds)
        return eng.finish(rnd)

    try:
        ((codes, _elapsed, details, _values),) = asyncio.run(release_while_one_dies())
    finally:
        eng.close()
    assert codes[:4] == bytes([OK] * 4)
    assert codes[4] == int(Outcome.CONN_ERROR), details
    assert 4 in details
