"""Counts fork()s, so that a child notices it must not touch the sockets it inherited."""

from __future__ import annotations

import os

_generation = 0


def _after_fork_in_child() -> None:
    global _generation
    _generation += 1


def generation() -> int:
    """Changes in a child process after every fork(); the same value means the same process."""
    return _generation


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
