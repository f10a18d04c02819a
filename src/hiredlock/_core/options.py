"""The options of the lock makers, written once for both APIs.

lock(), rlock(), semaphore(), rwlock() and synchronized() of both clients: a TypedDict per family,
which types their **options (PEP 692) and whose keys are the names each method accepts at run
time (check)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Callable, Generic, Optional, TypeVar

from .compat import TypedDict
from .validation import Duration

_L = TypeVar("_L")


class LockOptions(TypedDict, Generic[_L], total=False):
    """The options of one lock (lock(), rlock(), and each permit or side of semaphore() and
    rwlock()); _L is the API's lock class, which on_lost is called with."""

    blocking_timeout: Optional[Duration]
    auto_renew: bool
    max_hold: Optional[Duration]
    on_lost: Optional[Callable[[_L], Any]]
    max_extensions: Optional[int]
    fencing: bool
    wake: Optional[bool]
    owner: Optional[str]


class AdoptingOptions(LockOptions[_L], Generic[_L], total=False):
    """lock()'s: a lock's options, and the token of a lock another holder took (hand-over)."""

    token: Optional[str]


if TYPE_CHECKING:
    from typing import TypeAlias

    # A lock's keyword arguments, whatever its API: its options, and a token (LockState.__init__)
    LockKeywords: TypeAlias = AdoptingOptions[Any]


class LockCallOptions(AdoptingOptions[_L], Generic[_L], total=False):
    """lock()'s, with whether it is a fair lock."""

    fair: bool


class LockMakerOptions(LockOptions[_L], Generic[_L], total=False):
    """lock()'s and synchronized()'s: a lock's options, and whether it is a fair lock."""

    fair: bool


def check(method: str, options: Mapping[str, object], family: type[Any]) -> None:
    """Refuses an option that `family` (one of the TypedDicts above) does not name, as Python
    refuses an unknown keyword argument, naming the public method (e.g. "Redlock.lock")."""
    known = family.__optional_keys__
    for name in options:
        if name not in known:
            raise TypeError(f"{method}() got an unexpected keyword argument {name!r}")
