"""What `with` and `async with` do on exit, written once for every lock kind of both APIs (Lock,
RLock, a semaphore's permits, an RWLock's sides, FairLock; and their asyncio twins): the exit
releases, and when that release fails the block's own outcome decides what the caller sees."""

from __future__ import annotations

import logging
from typing import Any

from .errors import HiredlockError

_log = logging.getLogger("hiredlock.lock")


def release_failed_on_exit(name: object, exc_type: Any, error: HiredlockError) -> None:
    """The release at the end of a `with` block raised `error`: it propagates when the block
    ended normally; when the block raised, the block's exception wins and the failed release is
    only logged beside it."""
    if exc_type is None:
        raise error
    _log.warning("releasing %r after an exception failed: %s", name, error)
