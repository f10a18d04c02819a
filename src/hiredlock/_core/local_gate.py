"""What a lock's state asks of its local gate: the one thread or task of this process that holds
the lock object (ThreadGate in hiredlock/_sync/gate.py for threads, TaskGate in
hiredlock/aio/_gate.py for the tasks of an event loop).

A base class so that, compiled (local_gate.pxd), the state's calls of these methods on every
acquire and release are C calls: ThreadGate and TaskGate, compiled as extension types too,
override them (Cython takes the overrides' C signatures from this class's .pxd).
"""

from __future__ import annotations


class LocalGate:
    """Held by one thread or task at a time; waiting for it is the subclass's (enter)."""

    __slots__ = ()

    @property
    def held(self) -> bool:
        return self.is_held()

    def is_held(self) -> bool:
        """Whether some thread or task holds the gate."""
        raise NotImplementedError

    def try_enter(self) -> bool:
        """Takes the gate if it is free (False when held, by the caller too)."""
        raise NotImplementedError

    def mine(self) -> bool:
        """Whether the calling thread or task holds the gate."""
        raise NotImplementedError

    def leave(self) -> None:
        """Frees the gate, or hands it to a waiter."""
        raise NotImplementedError

    def leave_under_mutex(self) -> bool:
        """leave() for a caller that holds the lock's state mutex (LockState._let_go, which
        changes the lock's state and frees its gate under one take of it): frees the gate when
        no one waits for it; True when someone may, and the caller must call leave() once the
        mutex is free (a waiter is woken, or handed the gate, outside it)."""
        raise NotImplementedError
