"""Counts fork()s, so that a child notices it must not touch the sockets it inherited.

`generation` changes in a child process after every fork(); the same value means the same
process. It is read as a module attribute (`_fork.generation`) on every round's path, which is
cheaper than a call.
"""

from __future__ import annotations

import os

generation = 0


def _after_fork_in_child() -> None:
    global generation
    generation += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
