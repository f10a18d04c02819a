"""The blocking client's flavour (see hiredlock._core.flavour): rounds run in the calling thread on
an engine pool, waiters woken by a notices thread, auto-renewal by a watchdog thread."""

from __future__ import annotations

from .._core.flavour import Flavour
from .._core.session import Session
from .._engines.blocking import BlockingRounds
from .._engines.notices import ThreadNotices
from .._engines.pool import EnginePool
from .._engines.selection import engine_class
from .watchdog import Renewals


def _rounds(session: Session) -> BlockingRounds:
    return BlockingRounds(EnginePool(session))


BLOCKING = Flavour(
    engine_class=engine_class, rounds=_rounds, notices=ThreadNotices, renewals=Renewals
)
