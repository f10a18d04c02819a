"""A script round's commands in the pure-Python engine, beyond each name's EVALSHA: the EVAL
forms (Evals), and a batched script's commands (batch_rows; see hiredlock._core.scripts.BATCHED
and the engine contract's run). The native engine's are in _native/batches.pxi and
_native/round.pxi."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

from .._core.scripts import SCRIPT_BATCH_ITEMS
from .resp import pack_command


class Evals:
    """Each command's script as EVAL (with its source), formatted when first needed: on a
    connection that has not run the script yet, after NOSCRIPT, or for a reply the round leaves
    owed (not for an acquire's: see Script.acquires). `count`: the scripts' numkeys, or None
    when each of `argvs` starts with its own (a batched script's commands)."""

    __slots__ = ("acquires", "argvs", "batch", "count", "packed", "source")

    def __init__(
        self,
        source: bytes,
        count: Optional[bytes],
        argvs: Sequence[tuple[bytes, ...]],
        acquires: bool,
    ) -> None:
        self.source = source
        self.count = count
        self.argvs = argvs
        self.acquires = acquires
        self.packed: list[Optional[bytes]] = [None] * len(argvs)
        self.batch: Optional[bytes] = None

    def __getitem__(self, item: int) -> bytes:
        packed = self.packed[item]
        if packed is None:
            if self.count is None:
                packed = pack_command((b"EVAL", self.source, *self.argvs[item]))
            else:
                packed = pack_command((b"EVAL", self.source, self.count, *self.argvs[item]))
            self.packed[item] = packed
        return packed

    def all(self) -> bytes:
        if self.batch is None:
            self.batch = b"".join(self[item] for item in range(len(self.packed)))
        return self.batch


def batch_rows(numkeys: int, argvs: Sequence[tuple[bytes, ...]]) -> list[tuple[bytes, ...]]:
    """The arguments after the sha of each command of a batched script (see scripts.BATCHED):
    SCRIPT_BATCH_ITEMS names a command, their keys first, then how many keys a name has, then
    the names' other arguments."""
    per_key = b"%d" % numkeys
    width = len(argvs[0])
    if any(len(argv) != width for argv in argvs):
        raise ValueError("every item must have the same number of arguments")
    rows = []
    for start in range(0, len(argvs), SCRIPT_BATCH_ITEMS):
        chunk = argvs[start : start + SCRIPT_BATCH_ITEMS]
        keys = [key for argv in chunk for key in argv[:numkeys]]
        rest = [arg for argv in chunk for arg in argv[numkeys:]]
        rows.append((b"%d" % len(keys), *keys, per_key, *rest))
    return rows
