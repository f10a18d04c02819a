"""The native engine's event-fed rounds (begin_set_nx / begin_script, NativeRound) driven by the
asyncio driver (hiredlock._aio_driver), real servers: the same votes as the sync path, a stopped
master's timeout, cancellation at any point never desynchronising the engine nor leaving the
loop with a registration, and many rounds at once on one loop."""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import time

import pytest

from hiredlock._config import parse_masters
from hiredlock._poller import POLLIN, POLLOUT
from hiredlock._scripts import EXTEND, RELEASE, Outcome

native = pytest.importorskip("hiredlock._native")


async def minimal_drive(rnd, loop=None) -> None:
    """The round interface driven with loop.add_reader / add_writer and a timeout, for when the
    package has no asyncio driver."""
    loop = loop or asyncio.get_running_loop()
    readers: set[int] = set()
    writers: set[int] = set()

    def forget(fd: int) -> None:
        if fd in readers:
            readers.discard(fd)
            loop.remove_reader(fd)
        if fd in writers:
            writers.discard(fd)
            loop.remove_writer(fd)

    rnd.before_close = forget
    try:
        while not rnd.finished():
            woken = loop.create_future()

            def ready(fd, readable, writable, woken=woken):
                if not woken.done():
                    woken.set_result((fd, readable, writable))

            wanted = rnd.fds_wanted()
            for fd in readers | writers:
                forget(fd)
            for fd, events in wanted.items():
                if events & POLLIN:
                    loop.add_reader(fd, ready, fd, True, False)
                    readers.add(fd)
                if events & POLLOUT:
                    loop.add_writer(fd, ready, fd, False, True)
                    writers.add(fd)
            delay = max(0, rnd.next_deadline_ns - time.monotonic_ns()) / 1e9
            try:
                event = await asyncio.wait_for(woken, delay)
            except asyncio.TimeoutError:
                rnd.on_deadline(time.monotonic_ns())
            else:
                rnd.on_ready(*event)
    finally:
        for fd in readers | writers:
            forget(fd)
        rnd.before_close = None
        rnd.end()


try:
    from hiredlock._aio_driver import drive
except ImportError:
    drive = minimal_drive

OK = int(Outcome.OK)
TAKEN = int(Outcome.TAKEN)
TIMEOUT = int(Outcome.TIMEOUT)
SKIPPED = int(Outcome.SKIPPED)

TTL_MS = 10_000
TIMEOUT_MS = 500.0
FOREIGN = b"f" * 40
MINE = b"m" * 40


def new_engine(servers):
    return native.NativeEngine(parse_masters([srv.url for srv in servers]))


class Seen:
    """Every fd a round asked the loop to watch, so that the test can check none stays."""

    def __init__(self) -> None:
        self.fds: set[int] = set()

    def note(self, rnd) -> None:
        self.fds |= set(rnd.fds_wanted())


async def run_round(rnd, seen=None):
    if seen is not None:
        seen.note(rnd)
    await drive(rnd)
    return rnd


async def set_nx_async(engine, keys, tokens, timeout_ms=TIMEOUT_MS, seen=None):
    rnd = engine.begin_set_nx(keys, tokens, TTL_MS, timeout_ms)
    await run_round(rnd, seen)
    return engine.finish(rnd)


async def release_async(engine, keys, tokens, wait_all=True):
    argvs = [(key, token) for key, token in zip(keys, tokens)]
    rnd = engine.begin_script(RELEASE.sha, RELEASE.source, 1, argvs, TIMEOUT_MS, wait_all)
    await run_round(rnd)
    return engine.finish(rnd)


def release_sync(engine, keys, tokens, wait_all=True):
    argvs = [(key, token) for key, token in zip(keys, tokens)]
    return engine.run_script(RELEASE.sha, RELEASE.source, 1, argvs, TIMEOUT_MS, wait_all)


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


def test_native_round_gives_the_votes_of_the_sync_path(masters5, key):
    keys_by_path = {
        path: [f"{key}:{path}:{name.decode()}".encode() for name in LAYOUTS]
        for path in ("sync", "async")
    }
    for keys in keys_by_path.values():
        for k, (holders, _votes) in zip(keys, LAYOUTS.values()):
            hold_foreign(masters5, k, holders)
    expected = [votes for _holders, votes in LAYOUTS.values()]
    tokens = [b"%040d" % i for i in range(len(LAYOUTS))]
    sync_engine, async_engine = new_engine(masters5), new_engine(masters5)
    try:
        sync_set = sync_engine.set_nx(keys_by_path["sync"], tokens, TTL_MS, TIMEOUT_MS)
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


def test_native_round_holds_the_engine_until_it_ends(masters5, key):
    engine = new_engine(masters5[:3])
    try:
        rnd = engine.begin_set_nx([key.encode()], [MINE], TTL_MS, TIMEOUT_MS)
        with pytest.raises(RuntimeError):
            engine.set_nx([key.encode()], [MINE], TTL_MS, TIMEOUT_MS)
        asyncio.run(run_round(rnd))
        ((codes, *_),) = engine.finish(rnd)
        assert codes.count(OK) >= 2
        assert engine.finish(rnd) == [(codes, *_)]  # the same results, once ended
        assert engine.finish(engine.begin_set_nx([], [], TTL_MS, TIMEOUT_MS)) == []
        ((again, *_),) = engine.set_nx([key.encode()], [MINE], TTL_MS, TIMEOUT_MS)
        assert OK not in again
    finally:
        engine.close()


def test_native_round_a_stopped_master_times_out_while_the_others_answer(masters5, key):
    k = key.encode()
    hold_foreign(masters5, k, [0, 1])  # 2 TAKEN + 2 OK of 5: undecided without the stopped one
    engine = new_engine(masters5)
    timeout_ms = 300.0
    try:
        asyncio.run(set_nx_async(engine, [k + b":warm"], [b"w" * 40]))  # connections open
        masters5[4].stop()
        t0 = time.monotonic()
        ((codes, elapsed_ns, details, _values),) = asyncio.run(
            set_nx_async(engine, [k], [b"t" * 40], timeout_ms)
        )
        elapsed = time.monotonic() - t0
    finally:
        engine.close()
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


async def cancelled_rounds(engine, sleepers, held, mine, key, iterations, rng) -> int:
    """Cancels rounds at random points; returns how many were cancelled before finishing."""
    loop = asyncio.get_running_loop()
    token = MINE
    n_mid_round = 0
    for i in range(iterations):
        for index in rng.sample(range(5), rng.randrange(3)):
            sleepers.sleep(index, 0.002)
        # Rounds whose every reply would be an OK, were it taken for the next round's answer.
        # Begun inside the task, as an API layer does: a task cancelled before it runs has
        # begun nothing.
        if rng.random() < 0.5:
            fresh = f"{key}:{i}".encode()

            def begin(fresh=fresh):
                return engine.begin_set_nx([fresh], [token], TTL_MS, TIMEOUT_MS)

        else:
            argv = (mine, token, b"%d" % TTL_MS)

            def begin(argv=argv):
                return engine.begin_script(EXTEND.sha, EXTEND.source, 1, [argv], TIMEOUT_MS, True)

        seen = Seen()
        begun = []

        async def one_round(begin=begin, seen=seen, begun=begun):
            begun.append(begin())
            await run_round(begun[0], seen)

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
        assert all(rnd.finished() for rnd in begun)
        assert_unregistered(loop, seen.fds)
        # Whatever the cancelled round left owed must never pass for this round's answer.
        ((codes, _elapsed, details, _values),) = await set_nx_async(
            engine, [held], [token], seen=seen
        )
        assert OK not in codes, (i, codes, details)
        assert_unregistered(loop, seen.fds)
        sleepers.settle()
    return n_mid_round


def test_native_round_cancellation_never_desynchronises_the_engine(masters5, key):
    held = f"{key}:held".encode()
    mine = f"{key}:mine".encode()
    hold_foreign(masters5, held, range(5))
    for srv in masters5:
        srv.admin().set(mine, MINE, px=TTL_MS)
    engine = new_engine(masters5)
    sleepers = Sleepers(masters5)
    rng = random.Random(12)
    t0 = time.monotonic()
    try:
        n_mid_round = asyncio.run(
            asyncio.wait_for(
                cancelled_rounds(engine, sleepers, held, mine, key, 200, rng), timeout=120
            )
        )
        # the engine is whole for the sync path afterwards too
        ((codes, *_),) = engine.set_nx([held], [MINE], TTL_MS, TIMEOUT_MS)
        assert OK not in codes
    finally:
        engine.close()
        sleepers.close()
    assert time.monotonic() - t0 < 120
    assert n_mid_round >= 20, "too few cancellations came in the middle of a round"
    assert all(srv.admin().get(held) == FOREIGN for srv in masters5)


def test_native_round_a_hundred_rounds_at_once(masters5, key):
    servers = masters5[:3]
    engines = [new_engine(servers) for _ in range(100)]

    async def cycle(engine, index):
        k, token = f"{key}:{index}".encode(), b"%040d" % index
        ((taken, *_),) = await set_nx_async(engine, [k], [token])
        ((released, *_),) = await release_async(engine, [k], [token])
        return taken, released

    async def all_at_once():
        return await asyncio.wait_for(
            asyncio.gather(*(cycle(engine, i) for i, engine in enumerate(engines))), 60
        )

    try:
        outcomes = asyncio.run(all_at_once())
    finally:
        for engine in engines:
            engine.close()
    # set_nx stops at a quorum: the third master's vote may be SKIPPED, and if its connection
    # was still opening then, its SET was never sent (the release finds nothing there).
    for taken, released in outcomes:
        assert taken.count(OK) >= 2 and set(taken) <= {OK, SKIPPED}, taken
        for set_vote, release_vote in zip(taken, released):
            assert release_vote == OK if set_vote == OK else release_vote in (OK, TAKEN)


def test_native_round_a_master_dying_mid_round_leaves_no_registration(masters5, key):
    k = key.encode()
    for srv in masters5:
        srv.admin().set(k, MINE, px=TTL_MS)
    engine = new_engine(masters5)

    async def release_while_one_dies():
        loop = asyncio.get_running_loop()
        await set_nx_async(engine, [k + b":warm"], [b"w" * 40])  # connections open
        masters5[4].stop()
        # wait_all: the round waits for master 4 until it answers, or its connection goes
        rnd = engine.begin_script(RELEASE.sha, RELEASE.source, 1, [(k, MINE)], 2000.0, True)
        seen = Seen()
        task = asyncio.ensure_future(run_round(rnd, seen))
        await asyncio.sleep(0.05)
        assert not rnd.finished()
        masters5[4].kill()  # its socket is reset: the round closes it, off the loop first
        t0 = time.monotonic()
        await asyncio.wait_for(task, 5)
        assert time.monotonic() - t0 < 1.0
        assert_unregistered(loop, seen.fds)
        return engine.finish(rnd)

    try:
        ((codes, _elapsed, details, _values),) = asyncio.run(release_while_one_dies())
    finally:
        engine.close()
    assert codes[:4] == bytes([OK] * 4)
    assert codes[4] == int(Outcome.CONN_ERROR), details
    assert 4 in details
