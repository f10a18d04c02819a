"""Counts fork()s, so that a child notices it must not touch the sockets it inherited.

`generation[0]` changes in a child process after every fork(); the same value means the same
process. `generation` is a one-element list that the modules import by name (`from .fork import
generation as _fork_generation`) and read as `_fork_generation[0]` on every round's path: a
global lookup and an index, cheaper than a call, or than reading another module's attribute
(about 240 instructions in a compiled module). The compiled modules declare the name a `cdef list`
in their .pxd, so that their reads are an index in C with no lookup at all. (No call, uncompiled:
`with lock:`'s exit reads it before release(), and a call there would be one more point where a
signal handler may run and skip the release.)
"""

from __future__ import annotations

import os

generation: list[int] = [0]


def _after_fork_in_child() -> None:
    generation[0] += 1


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
