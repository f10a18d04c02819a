"""A small pool of engines, so that threads never share a connection and never wait for one.

It takes no lock of its own: list.append and list.pop are atomic, and this is on every round's
path. close() and a concurrent checkin() are ordered by re-checking `closed` after the append.
"""

from __future__ import annotations

from typing import Callable

from . import _fork
from ._contract import Engine
from ._errors import HiredlockError


class EnginePool:
    """Hands each caller an engine of its own; engines come back for reuse when the call ends."""

    def __init__(self, factory: Callable[[], Engine]) -> None:
        self._factory = factory
        self._idle: list[Engine] = []
        self._closed = False
        self._generation = _fork.generation()

    def checkout(self) -> Engine:
        # _fork._generation, not generation(): an attribute read is cheaper than a call, and
        # this runs twice a round
        if self._generation != _fork._generation:
            self._after_fork()
        if self._closed:
            raise HiredlockError("this Redlock is closed")
        try:
            return self._idle.pop()
        except IndexError:
            return self._factory()

    def checkin(self, engine: Engine) -> None:
        if self._closed or self._generation != _fork._generation:
            engine.close()
            return
        self._idle.append(engine)
        if self._closed:  # close() ran meanwhile and may have missed this engine
            self._close_idle()

    def close(self) -> None:
        self._closed = True
        self._close_idle()

    def _close_idle(self) -> None:
        while True:
            try:
                engine = self._idle.pop()
            except IndexError:
                return
            engine.close()

    def _after_fork(self) -> None:
        # The parent's engines hold the parent's sockets: forget them (their close() does no I/O
        # in a child) and start afresh.
        self._generation = _fork.generation()
        self._close_idle()
