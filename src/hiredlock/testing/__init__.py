"""Testing code that takes hiredlock locks: masters in memory (no server, no socket).

    masters = hiredlock.testing.memory_masters(5)
    redlock = hiredlock.Redlock(masters)          # or hiredlock.aio.AsyncRedlock(masters)

The masters run the library's own Lua scripts (on lupa's Lua 5.1), and a test can make faults:
stop(i) / resume(i), kill(i) / restart(i), delay(i, seconds), and advance(seconds) (the masters'
clock moves on, so locks expire). Needs the `testing` extra: pip install 'hiredlock[testing]'.
"""

from __future__ import annotations

from ._engine import MemoryEngine
from ._masters import MemoryMaster, MemoryMasters, memory_masters
from ._store import MemoryStore

__all__ = ["MemoryEngine", "MemoryMaster", "MemoryMasters", "MemoryStore", "memory_masters"]
