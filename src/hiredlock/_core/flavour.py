"""What makes a client blocking or asyncio, given to it at construction: one Flavour object (the
blocking one is hiredlock._sync.flavour's, the asyncio one hiredlock.aio._flavour's)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from .masters import MasterSpec
    from .session import Session


def _no_renewals(session: Session) -> None:
    return None


@dataclass(frozen=True)
class Flavour:
    """The parts of a client that depend on how it waits, each made from its Session.

    engine_class: the engine class for a backend name ("auto", "native", "python") and the
                  client's masters (masters in memory have their own).
    rounds:       what runs the client's rounds: session.rounds, with run(steps, pin=None).
    notices:      what wakes its waiters on a release (see _engines/notices.py).
    renewals:     what renews its auto-renewed locks (a blocking client's watchdog), or None
                  where its locks schedule their own renewals (on the event loop).
    """

    engine_class: Callable[[str, tuple[MasterSpec, ...]], Any]
    rounds: Callable[[Session], Any]
    notices: Callable[[Session], Any]
    renewals: Callable[[Session], Any] = _no_renewals
