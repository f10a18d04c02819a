"""A round of many names for a per-name script (a release, the unlock after a failed attempt, an
extend) goes to each standalone master as a few commands of the batching script
(hiredlock/_core/scripts.py's BATCHED), SCRIPT_BATCH_ITEMS names each, and each name's vote is
what its own EVALSHA would have given: OK or TAKEN with the script's integer, or the error it
raised (a WRONGTYPE key), that name's alone. The script cache can be flushed under it, before a
round or while its replies are owed, and every name's script still runs. A cluster-mode server
given as a master refuses a batch of names in several slots (CROSSSLOT): its names then go one by
one, in that round and the later ones."""

from __future__ import annotations

import math
import socket

import pytest
from clusters import whole_cluster_server
from support import urls, wait_until

from hiredlock._core.masters import parse_masters
from hiredlock._core.requests import RunScript
from hiredlock._core.scripts import (
    EXTEND,
    RELEASE,
    RELEASE_AFTER_FAILURE,
    SCRIPT_BATCH_ITEMS,
    Outcome,
    Script,
)
from hiredlock._engines.selection import engine_class

NAMES = 2 * SCRIPT_BATCH_ITEMS + 5  # three commands a master, the last one short
CHANNEL = b"batched-test-channel"


def _engine(engine, servers):
    return engine_class(engine)(parse_masters(urls(servers)))


def _request(script: Script, argvs, timeout_ms: float = 500.0) -> RunScript:
    return RunScript(script.sha, script.source, 1, argvs, timeout_ms, True, True)


def _script_calls(server, what: str = "calls") -> int:
    stats = server.admin().info("commandstats")
    return sum(stats.get(f"cmdstat_{name}", {}).get(what, 0) for name in ("eval", "evalsha"))


def _key(i: int) -> bytes:
    return b"batched:%d" % i


def _token(i: int) -> bytes:
    return b"token-%d" % i


def test_each_name_of_a_batched_release_gets_its_own_vote(engine, masters5):
    """Names held with our token, by another holder, missing, and one that holds a hash on one
    master: one command per SCRIPT_BATCH_ITEMS names reaches each master, and each name's votes
    are those of its own release."""
    servers = masters5[:3]
    wrongtype, wrongtype_master = 7, 1
    for server in servers:
        admin = server.admin()
        admin.config_resetstat()
        for i in range(NAMES):
            if i % 3 == 0:
                admin.set(_key(i), _token(i))
            elif i % 3 == 1:
                admin.set(_key(i), b"someone else")
    servers[wrongtype_master].admin().delete(_key(wrongtype))
    servers[wrongtype_master].admin().hset(_key(wrongtype), "field", "value")
    argvs = [(_key(i), _token(i), CHANNEL) for i in range(NAMES)]
    eng = _engine(engine, servers)
    try:
        results = eng.run(_request(RELEASE, argvs))
    finally:
        eng.close()
    assert len(results) == NAMES
    for i, (codes, _elapsed, details, values) in enumerate(results):
        for m in range(3):
            if i == wrongtype and m == wrongtype_master:
                assert codes[m] == Outcome.ERROR, (i, m, codes)
                assert details is not None and details[m].startswith("WRONGTYPE"), details
                continue
            ours = i % 3 == 0
            assert codes[m] == (Outcome.OK if ours else Outcome.TAKEN), (i, m, codes, details)
            assert values is not None and values[m] == (1 if ours else 0), (i, m, values)
        if i != wrongtype:
            assert details is None, (i, details)
    for m, server in enumerate(servers):
        admin = server.admin()
        assert _script_calls(server) == math.ceil(NAMES / SCRIPT_BATCH_ITEMS)
        for i in range(NAMES):
            expected = None if i % 3 != 1 else b"someone else"
            if i == wrongtype and m == wrongtype_master:
                assert admin.type(_key(i)) == b"hash"
            else:
                assert admin.get(_key(i)) == expected, (m, i)


@pytest.mark.parametrize("script", ["extend", "release_after_failure"])
def test_a_batched_script_gives_each_name_its_integer_reply(engine, masters5, script):
    """An extend's PEXPIRE reply and the unlock after a failed attempt's pttl code are each
    name's own, in the names' order, across commands."""
    servers = masters5[:1]
    admin = servers[0].admin()
    for i in range(NAMES):
        admin.set(_key(i), _token(i) if i % 2 else b"someone else", px=60_000)
    if script == "extend":
        argvs = [(_key(i), _token(i), b"90000") for i in range(NAMES)]
        request = _request(EXTEND, argvs)
    else:
        argvs = [(_key(i), _token(i), CHANNEL) for i in range(NAMES)]
        request = _request(RELEASE_AFTER_FAILURE, argvs)
    eng = _engine(engine, servers)
    try:
        results = eng.run(request)
    finally:
        eng.close()
    for i, (codes, _elapsed, _details, values) in enumerate(results):
        assert values is not None
        if i % 2:
            assert (codes[0], values[0]) == (Outcome.OK, 1), (i, codes, values)
        elif script == "extend":
            assert (codes[0], values[0]) == (Outcome.TAKEN, 0), (i, codes, values)
        else:  # someone else's key: -2 - its pttl
            assert codes[0] == Outcome.TAKEN and -2 - 60_000 <= values[0] < -2 - 50_000, values
    for i in range(NAMES):
        pttl = admin.pttl(_key(i))
        if script == "extend" and i % 2:
            assert pttl > 60_000, (i, pttl)
        elif i % 2:
            assert pttl == -2, (i, pttl)  # released
        else:
            assert 0 < pttl <= 60_000, (i, pttl)


def test_a_flushed_script_cache_runs_the_batch_from_its_source(engine, masters5):
    """The second round goes as EVALSHA (the connection ran the batching script); after SCRIPT
    FLUSH its NOSCRIPT replies are answered with the EVAL, in the round."""
    servers = masters5[:3]
    eng = _engine(engine, servers)
    try:
        for attempt in range(3):
            for server in servers:
                admin = server.admin()
                for i in range(NAMES):
                    admin.set(_key(i), _token(i))
                if attempt:
                    admin.script_flush()
            results = eng.run(
                _request(RELEASE, [(_key(i), _token(i), CHANNEL) for i in range(NAMES)])
            )
            assert all(codes == bytes([Outcome.OK] * 3) for codes, *_ in results), attempt
            for server in servers:
                assert server.admin().dbsize() == 0
    finally:
        eng.close()


def test_a_batch_whose_replies_come_after_a_flush_still_runs(engine, masters5):
    """The master sleeps, then flushes its script cache, before it reads the round's EVALSHAs:
    the round ends first (TIMEOUT), and the NOSCRIPT replies that come later are answered by the
    next round with the batch's EVAL, so every name is released."""
    servers = masters5[:1]
    admin = servers[0].admin()
    eng = _engine(engine, servers)
    sleeper = None
    try:
        # (the connection's first round sends the script as EVAL: later ones as EVALSHA)
        eng.run(_request(RELEASE, [(_key(i), b"nobody", CHANNEL) for i in range(NAMES)]))
        for i in range(NAMES):
            admin.set(_key(i), _token(i))
        sleeper = socket.create_connection(("127.0.0.1", servers[0].port))
        sleeper.sendall(
            b"*3\r\n$5\r\nDEBUG\r\n$5\r\nSLEEP\r\n$3\r\n0.5\r\n*2\r\n$6\r\nSCRIPT\r\n$5\r\nFLUSH\r\n"
        )
        wait_until(lambda: _blocked(servers[0].port), 5, "the master to sleep")
        argvs = [(_key(i), _token(i), CHANNEL) for i in range(NAMES)]
        results = eng.run(_request(RELEASE, argvs, timeout_ms=50.0))
        assert all(codes[0] == Outcome.TIMEOUT for codes, *_ in results)
        assert admin.dbsize() == NAMES  # (redis-py's connection waits out the sleep)

        def released() -> bool:
            eng.run(_request(RELEASE, [(b"batched:other", b"x", CHANNEL)] * 2))
            return admin.dbsize() == 0

        wait_until(released, 5, "the late NOSCRIPT replies to be answered with the EVAL")
    finally:
        if sleeper is not None:
            sleeper.close()
        eng.close()


def _blocked(port: int) -> bool:
    """True when a PING on a new connection gets no answer within 20 ms (the server sleeps)."""
    with socket.create_connection(("127.0.0.1", port)) as probe:
        probe.sendall(b"*1\r\n$4\r\nPING\r\n")
        probe.settimeout(0.02)
        try:
            probe.recv(64)
        except (TimeoutError, socket.timeout):
            return True
        return False


def test_names_with_unequal_arguments_are_refused_before_any_io(engine, masters5):
    servers = masters5[:1]
    servers[0].admin().config_resetstat()
    eng = _engine(engine, servers)
    try:
        with pytest.raises(ValueError, match="same number of arguments"):
            eng.run(_request(RELEASE, [(_key(1), _token(1), CHANNEL), (_key(2), _token(2))]))
    finally:
        eng.close()
    assert _script_calls(servers[0]) == 0


@pytest.fixture(scope="module")
def whole_cluster(redis_server_bin):
    server = whole_cluster_server()
    yield server
    server.cleanup()


def test_a_cluster_mode_master_gets_each_name_on_its_own(engine, whole_cluster, masters5):
    """The batch is refused there (its names are in many slots) and none of it runs; every name
    is then sent on its own, in the same round, and the next round sends no batch to it. The
    plain masters beside it still get batches."""
    servers = [whole_cluster, *masters5[:2]]
    names = SCRIPT_BATCH_ITEMS + 3
    for server in servers:
        server.admin().flushall()
        server.admin().config_resetstat()
    eng = _engine(engine, servers)
    try:
        for attempt in range(2):
            for server in servers:
                for i in range(names):
                    server.admin().set(_key(i), _token(i))
            argvs = [(_key(i), _token(i), CHANNEL) for i in range(names)]
            results = eng.run(_request(RELEASE, argvs))
            for i, (codes, _elapsed, details, values) in enumerate(results):
                assert codes == bytes([Outcome.OK] * 3), (attempt, i, codes, details)
                assert values == (1, 1, 1), (attempt, i, values)
            for server in servers:
                assert server.admin().dbsize() == 0, (attempt, server)
    finally:
        eng.close()
    # the first round's batch commands refused, then one script call per name in both rounds
    assert _script_calls(whole_cluster) == 2 * names
    assert _script_calls(whole_cluster, "rejected_calls") == math.ceil(names / SCRIPT_BATCH_ITEMS)
    for server in masters5[:2]:
        assert _script_calls(server) == 2 * 2
