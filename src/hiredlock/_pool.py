"""A small pool of engines, so that threads never share a connection and never wait for one."""

from __future__ import annotations

import threading
from typing import Callable

from . import _fork
from ._contract import Engine
from ._errors import HiredlockError


class EnginePool:
    """Hands each caller an engine of its own; engines come back for reuse when the call ends."""

    def __init__(self, factory: Callable[[], Engine]) -> None:
        self._factory = factory
        self._idle: list[Engine] = []
        self._mutex = threading.Lock()
        self._closed = False
        self._generation = _fork.generation()

    def checkout(self) -> Engine:
        if self._generation != _fork.generation():
            self._after_fork()
        with self._mutex:
            if self._closed:
                raise HiredlockError("this Redlock is closed")
            if self._idle:
                return self._idle.pop()
        return self._factory()

    def checkin(self, engine: Engine) -> None:
        with self._mutex:
            if not self._closed and self._generation == _fork.generation():
                self._idle.append(engine)
                return
        engine.close()

    def close(self) -> None:
        with self._mutex:
            self._closed = True
            idle, self._idle = self._idle, []
        for engine in idle:
            engine.close()

    def _after_fork(self) -> None:
        # The parent's engines hold the parent's sockets: forget them (their close() does no I/O
        # in a child) and start afresh. The mutex may have been held by a thread that is not here.
        self._mutex = threading.Lock()
        idle, self._idle = self._idle, []
        self._generation = _fork.generation()
        for engine in idle:
            engine.close()
