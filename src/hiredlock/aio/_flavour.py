"""The asyncio client's flavour (see hiredlock._core.flavour): rounds batched on the event loop,
waiters woken from the loop; its locks schedule their own renewals as tasks of the rounds."""

from __future__ import annotations

from .._core.flavour import Flavour
from .._engines.selection import engine_class
from ._notices import LoopNotices
from ._rounds import AsyncRounds

ASYNCIO = Flavour(engine_class=engine_class, rounds=AsyncRounds, notices=LoopNotices)
