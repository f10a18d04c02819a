"""Turns: the blocking acquires of one client that want the same name take turns at the masters.

Waiters of one process that all try the masters split the votes among themselves: each release
starts a herd of attempts, most of which fail and unlock again. Only one of them needs to contend
at a time: a blocking acquire of a lock kind that takes turns (a plain or fenced lock) first waits
for its turn on the name's local gate (a ThreadGate or a TaskGate, no network traffic), within its
deadline, then makes its attempts, and gives the turn to the next waiter when its call ends (the
lock taken, given up or an exception). The masters still decide who holds the lock: a turn only
spares them attempts that would split the votes. Other processes contend as before, one waiter
each.

A gate is made on a name's first blocking acquire and dropped when nobody holds or waits on it.
Non-blocking acquires (one attempt) and the kinds that take no turns (fair, read-write, semaphore
permits, multilocks: their waiters do not exclude each other, or queue on the masters) skip it.
"""

from __future__ import annotations

from typing import Any, Callable


class Turns:
    """One client's gates, by lock key."""

    __slots__ = ("_gates",)

    def __init__(self) -> None:
        self._gates: dict[bytes, Any] = {}

    def gate(self, key: bytes, new_gate: Callable[[], Any]) -> Any:
        """The gate of `key` (made with new_gate() if there is none)."""
        gate = self._gates.get(key)
        if gate is None:
            gate = self._gates.setdefault(key, new_gate())
        return gate

    def done(self, key: bytes, gate: Any) -> None:
        """After a turn ends: the gate is dropped once nobody holds it or waits on it. (Two
        threads may race here and make a second gate for a moment: two waiters then contend at
        once, as they would without turns.)"""
        if not gate.held and not gate.waiting and self._gates.get(key) is gate:
            del self._gates[key]
