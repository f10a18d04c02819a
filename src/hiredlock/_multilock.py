"""MultiLock: one lock over several names, taken only if all of them are (see _core/multilocks.py
for what it shares with hiredlock.aio.AsyncMultiLock)."""

from __future__ import annotations

from ._core.multilocks import MultiLockBase
from ._lock import Lock

__all__ = ["MultiLock"]


class MultiLock(MultiLockBase, Lock):
    """A lock over several names, made by Redlock.multilock(): held when a quorum of masters
    holds every name, taken in one round per attempt and released together. It has Lock's API
    (acquire, release, extend, `with`, auto_renew, lost, on_lost, token, validity), fencing
    aside; `name` is the tuple of names."""

    __slots__ = ()
    _kind = "MultiLock"
