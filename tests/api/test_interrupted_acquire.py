"""An acquire interrupted after its SETs went out (Ctrl-C, a signal handler's exception) unlocks
every master before the exception propagates: no stray key blocks the name for its whole ttl."""

from __future__ import annotations

import random
import signal
import traceback

import pytest
from support import assert_no_key, debug_sleep, urls

from hiredlock import Lock
from hiredlock.lock import WithStatement


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


INTERRUPTS = 150


def test_an_interrupt_anywhere_in_a_cycle_leaves_no_key(engine, make_redlock, masters5, key):
    """A KeyboardInterrupt raised at any point of a `with lock:` loop, even after the lock was
    taken or while it is being let go, leaves neither a key nor a held Lock behind: an interrupted
    acquire gives the lock back, an interrupted release still releases. (`with`, as users write
    it: an interrupt between a bare acquire() and release() in the caller's own code would leave
    the lock held, as it would a threading.Lock.)"""
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    servers = masters5[:3]
    rl = make_redlock(urls(servers), master_timeout=0.5)
    lock = rl.lock(key, 30, blocking_timeout=0)  # `with` tries once: nobody else holds it
    previous = signal.signal(signal.SIGALRM, _raise_keyboard_interrupt)
    try:
        for attempt in range(INTERRUPTS):
            delay = rng.uniform(0.00005, 0.004)
            where = f"seed {seed}, interrupt {attempt} at {delay * 1e6:.0f} us"
            try:
                signal.setitimer(signal.ITIMER_REAL, delay)
                while True:
                    with lock:
                        pass
            except KeyboardInterrupt as interrupt:
                if lock.held:
                    # CPython may run a signal handler at a function's first instruction, before
                    # any of its code: at the entry of __exit__ or release() nothing of ours ran
                    # yet, and the Lock still holds the lock, which release() then lets go
                    # (README, "Interrupts and fork"). Anywhere else the lock must be given back.
                    assert _interrupted_at_entry(interrupt, WithStatement.__exit__, Lock.release), (
                        where,
                        traceback.format_tb(interrupt.__traceback__),
                    )
                    lock.release()
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            assert not lock.held, where
            assert_no_key(servers, key, f"({where})", timeout=3)
    finally:
        signal.signal(signal.SIGALRM, previous)


def _interrupted_at_entry(exc: BaseException, *functions) -> bool:
    """The interrupt came at the first instruction of one of `functions` (the innermost frame
    of ours in its traceback is one of them, at its `def` line)."""
    codes = {function.__code__: function.__code__.co_firstlineno for function in functions}
    entry = None
    tb = exc.__traceback__
    while tb is not None:
        code = tb.tb_frame.f_code
        if code in codes:
            entry = tb.tb_lineno == codes[code]
        tb = tb.tb_next
    return bool(entry)


def _raise_keyboard_interrupt(signum, frame):
    raise KeyboardInterrupt
