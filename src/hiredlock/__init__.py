"""hiredlock: Redlock distributed locks on N independent Redis masters.

from hiredlock import Redlock
with Redlock(["redis://127.0.0.1:6379/0", ...]) as redlock:
    with redlock.lock("report:2026-11", ttl=30):
        ...
"""

import os as _os

from . import _compiled

# Before any module that may run compiled is imported: none may be stale (see _compiled.py).
_compiled.check(_os.path.dirname(__file__))

from ._core.errors import (
    AlreadyAcquired,
    EngineUnavailable,
    HiredlockError,
    LockLost,
    LockNotAcquired,
    MasterConfigError,
    NotHeld,
    QuorumUnreachable,
    SemaphoreSizeMismatch,
    TooManyExtensions,
    Vote,
)
from ._core.events import Event, EventKind
from ._core.masters import MasterSpec
from ._core.observe import LockStats
from ._core.scripts import MAX_TTL_MS, Outcome
from ._engines.selection import available_backends
from ._fairlock import FairLock
from ._lock import Lock
from ._multilock import MultiLock
from ._redlock import KeyState, Redlock, Removed
from ._rlock import RLock
from ._rwlock import ReadLock, RWLock, WriteLock
from ._semaphore import Permit, Semaphore

MAX_TTL: float = MAX_TTL_MS / 1000.0
"""The longest ttl a lock may have, in seconds (2**31 - 1 ms, about 24.8 days)."""

__version__ = "0.1.0"

__all__ = [
    "MAX_TTL",
    "AlreadyAcquired",
    "EngineUnavailable",
    "Event",
    "EventKind",
    "FairLock",
    "HiredlockError",
    "KeyState",
    "Lock",
    "LockLost",
    "LockNotAcquired",
    "LockStats",
    "MasterConfigError",
    "MasterSpec",
    "MultiLock",
    "NotHeld",
    "Outcome",
    "Permit",
    "QuorumUnreachable",
    "RLock",
    "RWLock",
    "ReadLock",
    "Redlock",
    "Removed",
    "Semaphore",
    "SemaphoreSizeMismatch",
    "TooManyExtensions",
    "Vote",
    "WriteLock",
    "__version__",
    "available_backends",
]
