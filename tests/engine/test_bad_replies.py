"""Masters that answer badly cost one failed vote and their connection, never more.

* A malformed reply is a failed vote ("protocol error: ..."), not an exception out of acquire();
  the connection is dropped, and the next round, on a new connection, works.
* A round's time is bounded as a whole: a reply dripped a byte at a time costs the round its
  master_timeout, not one timeout per byte.
* A reply larger than MAX_REPLY_BYTES (a huge bulk length, an endless line, a huge array) fails the
  vote ("reply too large") and drops the connection, without reading it into memory.
"""

from __future__ import annotations

import re
import threading
import time

import pytest
from fake_master import FakeMaster, drip, send_forever
from support import EXTRA_SLACK

from hiredlock import Outcome, QuorumUnreachable

SLACK = 1.0 + EXTRA_SLACK  # seconds on top of master_timeout for a round, on a loaded machine
MASTER_TIMEOUT = 0.05


@pytest.fixture
def fake_master():
    made = []

    def make(misbehave, bad_connections=1):
        made.append(FakeMaster(misbehave, bad_connections))
        return made[-1]

    yield make
    for fake in made:
        fake.close()


def failed_vote(lock):
    """The single master's vote of an attempt that must fail for want of a quorum."""
    start = time.monotonic()
    with pytest.raises(QuorumUnreachable) as info:
        lock.acquire(blocking=False)
    (vote,) = info.value.votes
    return vote, time.monotonic() - start


GARBAGE = {
    "unknown-type": b"?what\r\n",
    "bad-integer": b":12x\r\n",
    "bad-bulk-length": b"$-5\r\n",
}


@pytest.mark.parametrize("garbage", GARBAGE.values(), ids=GARBAGE.keys())
def test_malformed_reply_is_a_failed_vote(engine, make_redlock, fake_master, garbage):
    fake = fake_master(lambda sock: sock.sendall(garbage))
    rl = make_redlock([fake.url], master_timeout=0.5, retry_count=20, retry_delay=0.02)
    vote, _ = failed_vote(rl.lock("bad-reply", 10))
    assert vote.outcome in (Outcome.ERROR, Outcome.CONN_ERROR), vote
    assert "protocol error" in vote.detail, vote
    # The connection went with the bad reply: the next rounds, on a new one, work.
    lock = rl.lock("after-bad-reply", 10)
    assert lock.acquire(timeout=5)
    lock.release()
    assert fake.accepted >= 2
    assert fake.data == {}


def test_dripped_reply_costs_one_timeout(engine, make_redlock, fake_master):
    stop = threading.Event()
    reply = b"+" + b"O" * 2000 + b"\r\n"  # 4 s at one byte every 2 ms
    fake = fake_master(lambda sock: drip(sock, reply, 0.002, stop))
    try:
        rl = make_redlock([fake.url], master_timeout=MASTER_TIMEOUT, retry_count=1)
        vote, elapsed = failed_vote(rl.lock("dripped", 10))
        assert vote.outcome == Outcome.TIMEOUT, vote
        # the failed attempt's unlock round waits its own master_timeout too
        assert elapsed < 2 * MASTER_TIMEOUT + SLACK
    finally:
        stop.set()


def peak_rss_kib() -> int:
    with open("/proc/self/status") as status:
        return int(re.search(r"VmHWM:\s+(\d+)", status.read()).group(1))


def reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")  # resets VmHWM to the current RSS (Linux >= 4.0)
    except OSError:
        return False
    return True


HUGE = {
    "bulk": (b"$100000000\r\n", b"x" * 65536),
    "endless-line": (b"+", b"O" * 65536),
    "array": (b"*100000000\r\n", b":1\r\n" * 16384),
}


@pytest.mark.parametrize("head, chunk", HUGE.values(), ids=HUGE.keys())
def test_huge_reply_fails_the_vote_and_keeps_memory_flat(
    engine, make_redlock, fake_master, head, chunk
):
    if not reset_peak_rss():
        pytest.skip("needs /proc/self/clear_refs to measure the peak RSS")
    fake = fake_master(lambda sock: send_forever(sock, head, chunk, 200 * 1024 * 1024))
    rl = make_redlock([fake.url], master_timeout=MASTER_TIMEOUT, retry_count=1)
    lock = rl.lock("huge", 10)
    reset_peak_rss()
    before = peak_rss_kib()
    vote, elapsed = failed_vote(lock)
    grown_mib = (peak_rss_kib() - before) / 1024
    assert elapsed < 2 * MASTER_TIMEOUT + SLACK
    assert grown_mib < 8, f"peak RSS grew by {grown_mib:.1f} MiB"
    assert vote.outcome in (Outcome.ERROR, Outcome.CONN_ERROR), vote
    assert "reply too large" in vote.detail, vote
    # The connection went with it: the next round, on a new one, works.
    after = rl.lock("after-huge", 10)
    assert after.acquire(timeout=5)
    after.release()
    assert fake.accepted >= 2


def test_array_length_in_pieces_is_still_bounded(engine, make_redlock, fake_master):
    """An array whose length line comes in two pieces is judged once the line is whole."""

    def split_head(sock):
        sock.sendall(b"*100")
        time.sleep(0.05)
        send_forever(sock, b"000000\r\n", b":1\r\n" * 16384, 200 * 1024 * 1024)

    if not reset_peak_rss():
        pytest.skip("needs /proc/self/clear_refs to measure the peak RSS")
    fake = fake_master(split_head)
    rl = make_redlock([fake.url], master_timeout=0.5, retry_count=1)
    lock = rl.lock("split-array", 10)
    reset_peak_rss()
    before = peak_rss_kib()
    vote, _ = failed_vote(lock)
    grown_mib = (peak_rss_kib() - before) / 1024
    assert grown_mib < 8, f"peak RSS grew by {grown_mib:.1f} MiB"
    assert vote.outcome in (Outcome.ERROR, Outcome.CONN_ERROR), vote
    assert "reply too large" in vote.detail, vote


@pytest.mark.parametrize("head, chunk", HUGE.values(), ids=HUGE.keys())
def test_huge_late_reply_costs_no_memory(engine, make_redlock, fake_master, head, chunk):
    """A huge reply that comes after its round gave up is read between rounds: the bound holds
    there too, and the connection is replaced."""

    def late_huge(sock):
        time.sleep(0.2)  # past the attempt's rounds
        send_forever(sock, head, chunk, 200 * 1024 * 1024)

    if not reset_peak_rss():
        pytest.skip("needs /proc/self/clear_refs to measure the peak RSS")
    fake = fake_master(late_huge)
    rl = make_redlock([fake.url], master_timeout=MASTER_TIMEOUT, retry_count=1)
    vote, _ = failed_vote(rl.lock("late-huge", 10))
    assert vote.outcome == Outcome.TIMEOUT, vote
    time.sleep(0.4)  # the huge reply is on its way
    reset_peak_rss()
    before = peak_rss_kib()
    lock = rl.lock("after-late-huge", 10)
    assert lock.acquire(timeout=5)
    grown_mib = (peak_rss_kib() - before) / 1024
    lock.release()
    assert grown_mib < 8, f"peak RSS grew by {grown_mib:.1f} MiB"
    assert fake.accepted >= 2


AGGREGATES = {
    "array": b"*2\r\n:1\r\n:1\r\n",
    "map": b"%1\r\n:1\r\n:1\r\n",
    "push": b">2\r\n+message\r\n:1\r\n",
}


@pytest.mark.parametrize("reply", AGGREGATES.values(), ids=AGGREGATES.keys())
def test_aggregate_reply_is_a_failed_vote(engine, make_redlock, fake_master, reply):
    """No lock command gets an aggregate reply: a small one fails the vote too."""
    fake = fake_master(lambda sock: sock.sendall(reply))
    rl = make_redlock([fake.url], master_timeout=0.2, retry_count=1)
    vote, _ = failed_vote(rl.lock("aggregate", 10))
    assert vote.outcome in (Outcome.ERROR, Outcome.CONN_ERROR), vote
    assert vote.detail, vote
