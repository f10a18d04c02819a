"""The blocking client's flavour (see hiredlock._core.flavour): rounds run in the calling thread on
an engine pool, waiters woken by a notices thread, auto-renewal by a watchdog thread."""

from __future__ import annotations

from typing import Any

from .._core.flavour import Flavour
from .._core.session import Session
from .._engines.blocking import BlockingRounds
from .._engines.notices import ThreadNotices
from .._engines.pool import EnginePool
from .._engines.selection import engine_class, memory_group
from .watchdog import Renewals


def _rounds(session: Session) -> BlockingRounds:
    return BlockingRounds(EnginePool(session))


def _notices(session: Session) -> Any:
    memory = memory_group(session.masters)  # (masters in memory notify in the process)
    return ThreadNotices(session) if memory is None else memory.notices(session, False)


BLOCKING = Flavour(engine_class=engine_class, rounds=_rounds, notices=_notices, renewals=Renewals)
