"""The asyncio client's flavour (see hiredlock._core.flavour): rounds batched on the event loop,
waiters woken from the loop; its locks schedule their own renewals as tasks of the rounds."""

from __future__ import annotations

from typing import Any

from .._core.flavour import Flavour
from .._core.session import Session
from .._engines.selection import engine_class, memory_group
from ._notices import LoopNotices
from ._rounds import AsyncRounds


def _notices(session: Session) -> Any:
    memory = memory_group(session.masters)  # (masters in memory notify in the process)
    return LoopNotices(session) if memory is None else memory.notices(session, True)


ASYNCIO = Flavour(engine_class=engine_class, rounds=AsyncRounds, notices=_notices)
