"""Turns: the blocking acquires of one client that want the same name take turns at the masters.

Waiters of one process that all try the masters split the votes among themselves: each release
starts a herd of attempts, most of which fail and unlock again. Only one of them needs to contend
at a time: a blocking acquire of a lock kind that takes turns (a plain or fenced lock) first waits
for its turn on the name's local gate (a ThreadGate or a TaskGate, no network traffic), within its
deadline, then makes its attempts, and gives the turn to the next waiter when its call ends (the
lock taken, given up or an exception). The masters still decide who holds the lock: a turn only
spares them attempts that would split the votes. Other processes contend as before, one waiter
each.

A turn that ends with the lock taken leaves a note: which lock object took it (a sibling of the
next waiters, in this client) and in which acquisition. The next waiter's first attempt would find
the lock held: while that sibling still holds it (not released, lost or past its validity), the
waiter waits for a release notice or its retry timer before it tries the masters (see
LockBase._while_sibling_holds); a notice that comes while the sibling still holds it (a late one
of an earlier release) does not end that wait. A hint only: the attempt after the wait is judged
over a quorum like any other, and nothing the sibling does locally stands in for it.

A gate is made on a name's first blocking acquire and dropped, with its note, when nobody holds or
waits on it. Non-blocking acquires (one attempt) and the kinds that take no turns (fair,
read-write, semaphore permits, multilocks: their waiters do not exclude each other, or queue on
the masters) skip it.
"""

from __future__ import annotations

from typing import Any, Callable, Optional


class Turns:
    """One client's gates, by lock key."""

    __slots__ = ("_gates", "_holders")

    def __init__(self) -> None:
        self._gates: dict[bytes, Any] = {}
        # key -> (a weak reference to the lock object whose turn ended with the lock taken, its
        # acquisition)
        self._holders: dict[bytes, tuple[Any, int]] = {}

    def gate(self, key: bytes, new_gate: Callable[[], Any]) -> Any:
        """The gate of `key` (made with new_gate() if there is none)."""
        gate = self._gates.get(key)
        if gate is None:
            gate = self._gates.setdefault(key, new_gate())
        return gate

    def took(self, key: bytes, holder: tuple[Any, int]) -> None:
        """A turn ends with the lock taken (told by its holder before it leaves the gate):
        `holder` is (a weak reference to the lock object, its acquisition). A turn that ends
        without it leaves the note as it was (whether that holder still holds the lock is the
        next waiter's look)."""
        self._holders[key] = holder

    def holder(self, key: bytes) -> Optional[tuple[Any, int]]:
        """The note of the last turn that ended with the lock taken (see took), read by the
        waiter whose turn it is."""
        return self._holders.get(key)

    def done(self, key: bytes, gate: Any) -> None:
        """After a turn ends: the gate is dropped once nobody holds it or waits on it. (Two
        threads may race here and make a second gate for a moment: two waiters then contend at
        once, as they would without turns.)"""
        if not gate.held and not gate.waiting and self._gates.get(key) is gate:
            del self._gates[key]
            self._holders.pop(key, None)
