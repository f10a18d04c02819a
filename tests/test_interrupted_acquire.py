"""An acquire interrupted after its SETs went out (Ctrl-C, a signal handler's exception) unlocks
every master before the exception propagates: no stray key blocks the name for its whole ttl."""

from __future__ import annotations

import signal
import threading

import pytest
from support import assert_no_key, debug_sleep, urls


class Interrupted(Exception):
    """Raised by the test's signal handler, as a signal-based timeout would."""


@pytest.fixture
def interrupt_after():
    """interrupt_after(seconds): SIGALRM then, whose handler raises Interrupted."""

    def handler(signum, frame):
        raise Interrupted()

    previous = signal.signal(signal.SIGALRM, handler)

    def arm(seconds: float) -> None:
        signal.setitimer(signal.ITIMER_REAL, seconds)

    yield arm
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("fencing", [False, True], ids=["plain", "fenced"])
def test_an_interrupted_acquire_leaves_no_key(
    engine, make_redlock, masters5, key, interrupt_after, fencing
):
    """Two of three masters sleep 0.4 s: the SETs are out, the quorum is not in yet when the
    signal comes. Once the sleepers wake, no master may hold our token."""
    servers = masters5[:3]
    rl = make_redlock(urls(servers), master_timeout=1.0)
    lock = rl.lock(key, 30, fencing=fencing)
    sleepers = debug_sleep(servers[1:], 0.4)
    try:
        interrupt_after(0.05)
        with pytest.raises(Interrupted):
            lock.acquire(blocking=False)
    finally:
        for sock in sleepers:
            sock.close()
    assert not lock.held
    assert_no_key(servers, key, "after the interrupted acquire", timeout=3)


def test_an_interrupt_after_the_quorum_answered_gives_the_lock_back(
    engine, make_redlock, masters5, key
):
    """A KeyboardInterrupt raised at any point of acquire(), even after the lock was taken,
    leaves neither a key nor a held Lock behind (the caller never learned it had the lock)."""
    servers = masters5[:3]
    rl = make_redlock(urls(servers), master_timeout=0.5)
    lock = rl.lock(key, 30)
    interrupted = 0
    for delay in (0.0005, 0.001, 0.002, 0.004, 0.008):
        stop = threading.Event()
        previous = signal.signal(signal.SIGALRM, _raise_keyboard_interrupt)
        try:
            signal.setitimer(signal.ITIMER_REAL, delay)
            try:
                while not stop.is_set():
                    if lock.acquire(blocking=False):
                        lock.release()
            except KeyboardInterrupt:
                interrupted += 1
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        assert not lock.held
        assert_no_key(servers, key, f"after an interrupt at {delay * 1000:g} ms", timeout=3)
    assert interrupted == 5


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt
