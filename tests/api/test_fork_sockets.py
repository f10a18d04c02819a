"""A forked child closes the sockets it inherited from its parent's engines (closing its copy of
the file descriptor sends nothing while the parent still has it open), and the parent's
connections keep working."""

from __future__ import annotations

import os
import re

import pytest
from support import assert_no_key, in_child, urls

from hiredlock import Redlock

pytestmark = pytest.mark.fork


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
