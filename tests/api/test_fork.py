"""A forked child never touches its parent's locks, never deadlocks on state a parent thread held
at the fork, and renews its own auto-renewed locks.  It closes the sockets it inherited from its
parent's engines (closing its copy of the file descriptor sends nothing while the parent still
has it open), and the parent's connections keep working.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import re
import sys
import threading
import time

import pytest
from features_support import MT
from support import assert_no_key, assert_values, in_child, urls

from hiredlock import HiredlockError, NotHeld, Redlock

pytestmark = pytest.mark.fork


def test_a_child_does_not_hold_or_release_its_parents_locks(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5[:3]), master_timeout=MT)
    lock = rl.lock(key, 30)
    assert lock.acquire(blocking=False)
    token = lock.token

    def child() -> dict:
        seen = {"held": lock.held, "token": lock.token, "validity": lock.validity}
        try:
            lock.release()
        except NotHeld as exc:
            seen["release"] = f"NotHeld: {exc}"
        rl.close()
        return seen

    seen = in_child(child)
    assert seen["held"] is False and seen["token"] is None and seen["validity"] == 0.0
    assert seen["release"].startswith("NotHeld")
    assert_values(masters5[:3], key, token, "after the child released and closed")
    assert lock.held
    lock.release()  # the parent still holds it on every master: no LockLost


@pytest.mark.parametrize("how", ["sys.exit", "falls through"])
def test_leaving_a_with_block_in_a_child_sends_nothing(engine, make_redlock, masters5, key, how):
    rl = make_redlock(urls(masters5[:3]), master_timeout=MT)
    lock = rl.lock(key, 30)
    pid = None
    try:
        with lock:
            token = lock.token
            pid = os.fork()
            if pid == 0:
                if how == "sys.exit":
                    sys.exit(0)
            else:
                _, status = os.waitpid(pid, 0)
                assert os.WIFEXITED(status)
                assert_values(masters5[:3], key, token, "after the child left the with-block")
                assert lock.held
    finally:
        if pid == 0:
            rl.close()  # closing in the child releases nothing of the parent's either
            os._exit(0)


def test_a_child_can_take_a_lock_object_its_parent_made(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5[:3]), master_timeout=MT)
    lock = rl.lock(key, 30)
    other = rl.lock(key + ":child", 30)
    assert lock.acquire(blocking=False)

    def child() -> bool:
        assert other.acquire(blocking=False)
        other.release()
        assert not lock.acquire(blocking=False), "the parent holds it: the child must not get it"
        rl.close()
        return True

    assert in_child(child)
    lock.release()


@contextlib.contextmanager
def held_across_the_fork(state_mutex):
    """Holds a StateMutex (see _core/state_mutex.py) in this process while the block forks, as a
    thread inside a state change would. Only uncompiled: compiled, it is a C mutex that no Python
    code can hold (and that no thread holds while another runs Python code, so none at a fork);
    there, the tests check that the child's mutex is a new one."""
    python_lock = getattr(state_mutex, "lock", None)
    if python_lock is None:
        yield
        return
    python_lock.acquire()
    try:
        yield
    finally:
        python_lock.release()


def test_a_child_takes_a_lock_object_whose_state_mutex_a_parent_thread_held(
    engine, make_redlock, masters5, key
):
    rl = make_redlock(urls(masters5[:3]), master_timeout=MT)
    lock = rl.lock(key, 30)
    parent_mutex = lock._mutex

    def child() -> bool:
        assert lock.acquire(blocking=False)
        lock.release()
        assert lock._mutex is not parent_mutex
        rl.close()
        return True

    with held_across_the_fork(parent_mutex):
        assert in_child(child, timeout=20)
    assert lock.acquire(blocking=False)  # the parent's own mutex still works
    lock.release()


def test_a_child_closes_a_client_whose_state_mutex_a_parent_thread_held(
    engine, make_redlock, masters5, key
):
    rl = make_redlock(urls(masters5[:3]), master_timeout=MT)
    lock = rl.lock(key, 30)
    parent_mutex = rl.session.state_mutex

    def child() -> bool:
        assert lock.acquire(blocking=False)  # (its _took takes the client's state mutex)
        rl.close()  # releases it
        assert rl.session.state_mutex is not parent_mutex
        return True

    with held_across_the_fork(parent_mutex):
        assert in_child(child, timeout=20)
    assert_no_key(masters5[:3], key)
    with rl.lock(key, 30):  # the parent's own mutex still works
        pass


def test_auto_renewal_runs_in_a_child(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5[:3]), master_timeout=MT)
    parent_lock = rl.lock(key + ":parent", 0.6, auto_renew=True)
    assert parent_lock.acquire(blocking=False)  # the parent's watchdog thread is running

    def child() -> dict:
        lock = rl.lock(key, 0.6, auto_renew=True)
        assert lock.acquire(blocking=False)
        time.sleep(2.0)  # more than three ttls: only renewals keep it
        out = {"held": lock.held, "lost": lock.lost.is_set()}
        lock.release()
        rl.close()
        return out

    assert in_child(child) == {"held": True, "lost": False}
    parent_lock.release()


# The busy threads' locks renew every 30 ms: their Redlock's per-master timeout must leave a 90 ms
# ttl some validity.
BUSY_MT = 0.02


def _busy_library_threads(
    rl: Redlock, name: str, stop: threading.Event, cycles: list
) -> list[threading.Thread]:
    """Threads that stay inside the library: acquire/extend/release loops, and renewals every
    30 ms; `cycles` counts their completed cycles (a test checks they really ran)."""

    def cycle(index: int) -> None:
        lock = rl.lock(f"{name}:{index}", 0.09, auto_renew=True)
        while not stop.is_set():
            try:
                if lock.acquire(blocking=False):
                    lock.extend()
                    lock.release()
                    cycles.append(index)
            except HiredlockError:
                continue  # a round timed out on a loaded machine: the point is to keep going

    threads = [threading.Thread(target=cycle, args=(i,), daemon=True) for i in range(3)]
    for thread in threads:
        thread.start()
    return threads


def test_forks_while_threads_are_inside_the_library_never_deadlock(
    engine, make_redlock, masters5, key
):
    rl = make_redlock(urls(masters5[:3]), master_timeout=BUSY_MT)
    shared = rl.lock(key + ":shared", 5)
    stop = threading.Event()
    cycles: list = []
    threads = _busy_library_threads(rl, key, stop, cycles)
    try:
        for round_number in range(25):

            def child(round_number: int = round_number) -> bool:
                lock = rl.lock(f"{key}:child:{round_number}", 5, auto_renew=True)
                assert lock.acquire(timeout=5)
                lock.extend()
                lock.release()
                assert shared.acquire(timeout=5)
                shared.release()
                rl.close()
                return True

            assert in_child(child, timeout=20)
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
    assert len(cycles) > 10, f"the busy threads completed {len(cycles)} cycles only"


def _multiprocessing_child(master_urls: list, backend: str, name: str) -> None:
    with Redlock(master_urls, backend=backend, master_timeout=MT) as rl:
        lock = rl.lock(name, 5, auto_renew=True)
        assert lock.acquire(timeout=5)
        lock.release()


def test_multiprocessing_fork_children_with_busy_threads_finish(
    engine, make_redlock, masters5, key
):
    rl = make_redlock(urls(masters5[:3]), master_timeout=BUSY_MT)
    stop = threading.Event()
    cycles: list = []
    threads = _busy_library_threads(rl, key, stop, cycles)
    context = multiprocessing.get_context("fork")
    try:
        for index in range(10):
            process = context.Process(
                target=_multiprocessing_child,
                args=(urls(masters5[:3]), engine, f"{key}:mp:{index}"),
            )
            process.start()
            process.join(20)
            if process.is_alive():
                process.kill()
                process.join()
                pytest.fail("a multiprocessing child hung (a deadlock)")
            assert process.exitcode == 0
    finally:
        stop.set()
        for thread in threads:
            thread.join(10)
    assert len(cycles) > 10, f"the busy threads completed {len(cycles)} cycles only"


def test_an_rlock_owned_by_the_parent_is_free_of_it_in_a_child(engine, make_redlock, masters5, key):
    rl = make_redlock(urls(masters5[:3]), master_timeout=MT)
    rlock = rl.rlock(key, 30)
    assert rlock.acquire(blocking=False)
    token = rlock.lock.token

    def child() -> dict:
        out = {"held": rlock.held, "count": rlock.count}
        try:
            rlock.release()
        except NotHeld:
            out["release"] = "NotHeld"
        # The gate the parent holds is not held here: a try returns at once (the lock is taken).
        out["acquired"] = rlock.acquire(blocking=False)
        rl.close()
        return out

    assert in_child(child) == {"held": False, "count": 0, "release": "NotHeld", "acquired": False}
    assert_values(masters5[:3], key, token, "after the child touched the RLock")
    rlock.release()


# -- the sockets a child inherits ------------------------------------------------------------------


def socket_inodes_to(ports: set[int]) -> set[int]:
    """Inodes of the TCP sockets whose remote end is one of these local ports."""
    inodes = set()
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        try:
            with open(table) as lines:
                next(lines)
                for line in lines:
                    fields = line.split()
                    if int(fields[2].rsplit(":", 1)[1], 16) in ports:
                        inodes.add(int(fields[9]))
        except FileNotFoundError:
            continue
    return inodes


def fds_to(ports: set[int]) -> set[int]:
    """This process's file descriptors that are TCP connections to these ports."""
    inodes = socket_inodes_to(ports)
    found = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        match = re.fullmatch(r"socket:\[(\d+)\]", target)
        if match and int(match.group(1)) in inodes:
            found.add(int(name))
    return found


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc")
def test_child_closes_inherited_sockets(engine, masters5, key):
    masters = masters5[:3]
    ports = {master.port for master in masters}
    others = fds_to(ports)  # the test's own admin connections
    rl = Redlock(urls(masters), backend=engine)
    try:
        lock = rl.lock(key, 30)
        assert lock.acquire(blocking=False)
        ours = fds_to(ports) - others
        assert ours, "the engine's connections are not seen"

        def child():
            # A new engine, new connections; the parent's are closed, not merely forgotten.
            child_lock = rl.lock(key + ":child", 5)
            assert child_lock.acquire(blocking=False)
            child_lock.release()
            rl.close()
            return sorted(fds_to(ports) - others)

        left = in_child(child)
        assert left == [], f"the child still has connections to the masters: fds {left}"
        lock.release()  # the parent's connections still work
        assert_no_key(masters, key)
    finally:
        rl.close()
