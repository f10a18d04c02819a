"""The vote bookkeeping of a pure-Python round (python engine, and the memory engine of
hiredlock.testing): per key, per master (a place: see _engines/routing.py), and when each key was
decided; the native engine keeps the same in C (_native/round.pxi)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Optional

from .contract import RoundResult
from .master import ERROR, KIND_SCRIPT, KIND_SET, OK, PENDING, SKIPPED, TAKEN, TIMEOUT
from .resp import ReplyError

_MAX_DETAIL = 400  # characters of an error text kept in a vote (as the native engine)


class Votes:
    """Vote bookkeeping of one round: per key, per master, and when each key was decided (on
    `clock`, in ns: time.monotonic_ns unless the engine runs on a clock of its own)."""

    __slots__ = (
        "clock",
        "codes",
        "decided_at",
        "details",
        "fails",
        "n",
        "oks",
        "q",
        "t0",
        "undecided",
        "values",
    )

    def __init__(
        self,
        n_keys: int,
        n: int,
        q: int,
        t0: int,
        want_values: bool,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.clock = clock
        self.n = n
        self.q = q
        self.t0 = t0
        self.codes = [bytearray([PENDING]) * n for _ in range(n_keys)]
        self.oks = [0] * n_keys
        self.fails = [0] * n_keys
        self.decided_at = [0] * n_keys
        self.details: list[Optional[dict[int, str]]] = [None] * n_keys
        self.undecided = n_keys
        self.values = [[0] * n for _ in range(n_keys)] if want_values else None

    def vote(self, key: int, master: int, code: int, detail: Optional[str] = None) -> None:
        codes = self.codes[key]
        if codes[master] != PENDING:
            return
        codes[master] = code
        if detail is not None:
            self.explain(key, master, detail)
        if code == OK:
            self.oks[key] += 1
        else:
            self.fails[key] += 1
        if not self.decided_at[key] and (
            self.oks[key] >= self.q or self.fails[key] > self.n - self.q
        ):
            self.decided_at[key] = self.clock()
            self.undecided -= 1

    def vote_all(
        self, master: int, code: int, detail: Optional[str], keys: Optional[list[int]] = None
    ) -> None:
        """The same vote of one master (a column) on every key, or on `keys` (a link's)."""
        for key in range(len(self.codes)) if keys is None else keys:
            self.vote(key, master, code, detail)

    def explain(self, key: int, master: int, detail: str) -> None:
        if self.details[key] is None:
            self.details[key] = {}
        self.details[key][master] = detail[:_MAX_DETAIL]  # type: ignore[index]

    def count(self, key: int, master: int, kind: int, reply: Any) -> None:
        """Turns one reply into a vote (as the native engine does, reply type by reply type)."""
        if type(reply) is ReplyError:
            self.vote(key, master, ERROR, reply.text)
        elif kind == KIND_SET:
            if reply == b"OK":
                self.vote(key, master, OK)
            elif reply is None:
                self.vote(key, master, TAKEN)
            else:
                self.vote(key, master, ERROR, "unexpected reply to SET")
        elif type(reply) is int:
            if self.values is not None:
                self.values[key][master] = reply
            self.vote(key, master, OK if reply > 0 else TAKEN)
        elif reply is None:
            self.vote(key, master, TAKEN)
        else:
            self.vote(key, master, ERROR, "unexpected reply to the script")

    def count_batch(self, first: int, names: int, master: int, reply: Any) -> bool:
        """Turns a batched script's reply (see scripts.BATCHED), an array of the replies of the
        names from `first` on, into their votes, each as its own reply; an error reply is each
        name's vote. True when a name's reply in the array says READONLY (an error reply to the
        whole command is looked at by the round, as any reply)."""
        if type(reply) is list and len(reply) == names:
            readonly = False
            for key, one in enumerate(reply, first):
                self.count(key, master, KIND_SCRIPT, one)
                if type(one) is ReplyError and one.text.startswith("READONLY"):
                    readonly = True
            return readonly
        for key in range(first, first + names):
            if type(reply) is ReplyError:
                self.vote(key, master, ERROR, reply.text)
            else:
                self.vote(key, master, ERROR, "unexpected reply to the batched script")
        return False

    def explain_pending(self, master: int, detail: str, keys: Optional[list[int]] = None) -> None:
        """Gives the master's pending votes on undecided keys (they end as TIMEOUT) a reason."""
        for key in range(len(self.codes)) if keys is None else keys:
            if self.codes[key][master] == PENDING and not self.decided_at[key]:
                self.explain(key, master, detail)

    def results(self, end_ns: int) -> list[RoundResult]:
        """Masters still pending were SKIPPED if their key was decided, else they TIMED OUT."""
        out = []
        for key, (codes, decided, details) in enumerate(
            zip(self.codes, self.decided_at, self.details)
        ):
            if PENDING in codes:
                codes = codes.replace(b"\xff", bytes([SKIPPED if decided else TIMEOUT]))
            values = None if self.values is None else tuple(self.values[key])
            out.append(RoundResult(bytes(codes), (decided or end_ns) - self.t0, details, values))
        return out
