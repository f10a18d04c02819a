"""select.poll() where the OS has it; the same few calls on select.select() elsewhere (Windows).

The pure-Python engine is the fallback where the native engine cannot load, so it must run
wherever Python does.
"""

from __future__ import annotations

import select
from typing import Any

POLLIN = getattr(select, "POLLIN", 1)
POLLOUT = getattr(select, "POLLOUT", 4)


class SelectPoller:
    """The subset of select.poll's interface the engine uses, on select.select."""

    def __init__(self) -> None:
        self._events: dict[int, int] = {}

    def register(self, fd: Any, events: int) -> None:
        self._events[fd if isinstance(fd, int) else fd.fileno()] = events

    def unregister(self, fd: int) -> None:
        del self._events[fd]

    def poll(self, timeout_ms: float) -> list[tuple[int, int]]:
        readers = [fd for fd, events in self._events.items() if events & POLLIN]
        writers = [fd for fd, events in self._events.items() if events & POLLOUT]
        if not readers and not writers:
            return []
        readable, writable, broken = select.select(readers, writers, writers, timeout_ms / 1000)
        ready = dict.fromkeys(readable, POLLIN)
        for fd in (*writable, *broken):  # a failed connect shows as "exceptional" on Windows
            ready[fd] = ready.get(fd, 0) | POLLOUT
        return list(ready.items())


new_poller = getattr(select, "poll", SelectPoller)
