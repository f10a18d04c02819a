"""The caller's values checked before any I/O: lock names, durations (seconds, timedeltas) and
the other options."""

from __future__ import annotations

import datetime
import math
from typing import Any, Union

from .keys import RESERVED_KEY_PREFIXES
from .redaction import shown
from .scripts import MAX_TTL_MS
from .slots import has_hash_tag

Duration = Union[int, float, datetime.timedelta]


# -- lock names ----------------------------------------------------------------------------------


def lock_name(name: Any) -> bytes:
    """The Redis key for a lock name: the name itself, str encoded as UTF-8.

    Names under the fencing counters' prefix are refused: such a lock and a fenced lock's
    counter would be one key.
    """
    if isinstance(name, str):
        key = _utf8(name, "name")
    elif isinstance(name, bytes):
        key = bytes(name)
    else:
        # a bytearray or memoryview could change (or be released) while the lock holds its key
        hint = " (pass bytes(name))" if isinstance(name, (bytearray, memoryview)) else ""
        raise TypeError(f"name must be str or bytes, not {type(name).__name__}{hint}")
    if not key:
        raise ValueError("name must not be empty")
    _not_reserved(key, "name")
    return key


def _utf8(text: str, what: str) -> bytes:
    """`text` as UTF-8; ValueError naming `what` when it cannot be (a lone surrogate)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"{what} must be valid Unicode text (a lone surrogate at index {exc.start})"
        ) from None


def _not_reserved(key: bytes, what: str) -> None:
    for prefix in RESERVED_KEY_PREFIXES:
        if key.startswith(prefix):
            raise ValueError(
                f"{what} must not start with {prefix.decode()!r}: that prefix is reserved for "
                "hiredlock's own keys (fencing counters, semaphore permits, read-write and "
                "fair locks)"
            )


def namespace(value: Any) -> bytes:
    """The prefix of every key and channel a client writes (None: none), str encoded as UTF-8.

    A "{" in it must open a whole hash tag ("{app}:"): the tag then puts all its names in one
    cluster slot, where a "{" left open (or "{}") would change the slot of the names' keys and
    not of their internal keys."""
    if value is None:
        return b""
    if isinstance(value, str):
        raw = _utf8(value, "namespace")
    elif isinstance(value, bytes):
        raw = bytes(value)
    else:
        raise TypeError(f"namespace must be str, bytes or None, not {type(value).__name__}")
    if b"{" in raw and not has_hash_tag(raw):
        raise ValueError(
            f"namespace {shown(value)} has a '{{' that opens no hash tag (a '{{' needs a '}}' "
            "after it, with something in between, as in '{app}:')"
        )
    _not_reserved(raw, "namespace")
    return raw


# -- durations and other options -------------------------------------------------------------


def duration_ms(value: Any, name: str) -> float:
    """Seconds (int, float or timedelta) to milliseconds, at most MAX_TTL_MS in size.

    Refuses bools, non-numbers, NaN and infinities, and any duration longer than
    hiredlock.MAX_TTL (either sign: no caller takes a negative one), as a ValueError at the call
    that takes it rather than an OverflowError in a later round, sleep or wait.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, datetime.timedelta)):
        raise TypeError(
            f"{name} must be a number of seconds or a timedelta, not {type(value).__name__}"
        )
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if isinstance(value, int):
        ms: float = value * 1000  # exact: float(value) could overflow
    elif isinstance(value, datetime.timedelta):
        ms = value.total_seconds() * 1000.0
    else:
        ms = value * 1000.0  # may become inf: refused just below
    if ms > MAX_TTL_MS:
        raise ValueError(
            f"{name} must be at most {MAX_TTL_MS / 1000:.3f} s (hiredlock.MAX_TTL), "
            f"got {shown(value)}"
        )
    if ms < -MAX_TTL_MS:
        raise ValueError(f"{name} must be >= 0, got {shown(value)}")
    return float(ms)


def positive_duration_ms(value: Any, name: str) -> float:
    ms = duration_ms(value, name)
    if ms <= 0:
        raise ValueError(f"{name} must be positive, got {value!r}")
    return ms


def ttl_ms(value: Any, name: str = "ttl") -> int:
    """A ttl as whole milliseconds on the wire (rounded down, at least 1), within MAX_TTL_MS."""
    ms = positive_duration_ms(value, name)
    if ms < 1:
        raise ValueError(f"{name} must be at least 1 ms, got {value!r}")
    return int(ms)


def flag(value: Any, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, not {type(value).__name__}")
    return value


def non_negative_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {shown(value)}")
    return value


def non_negative_seconds(value: Any, name: str) -> float:
    ms = duration_ms(value, name)
    if ms < 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return ms / 1000.0


def drift_factor(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"drift_factor must be a number, not {type(value).__name__}")
    if not 0 <= value < 0.5:  # also refuses NaN
        raise ValueError(f"drift_factor must be in [0, 0.5), got {shown(value)}")
    return float(value)


# -- hand-over and owner labels ------------------------------------------------------------------

MAX_OWNER_BYTES = 64  # an owner label's UTF-8 size at most (it is stored with every holder's key)
_TOKEN_CHARS = frozenset("0123456789abcdef")


def lock_token(value: Any) -> bytes:
    """A token handed over by its holder (its lock's `token`: 40 lowercase hex characters)."""
    if not isinstance(value, str):
        raise TypeError(f"token must be a str (a lock's token), not {type(value).__name__}")
    if len(value) != 40 or not _TOKEN_CHARS.issuperset(value):
        raise ValueError("token must be 40 lowercase hex characters (a lock's token)")
    return value.encode()


def owner_label(value: Any) -> bytes:
    """What an owner label adds to the value stored for its holder: a space and the label
    (a token is 40 characters long, so the two never run into each other)."""
    if not isinstance(value, str):
        raise TypeError(f"owner must be a str (e.g. 'host:pid'), not {type(value).__name__}")
    if not value:
        raise ValueError("owner must not be empty (None: no owner label)")
    if any(ord(char) < 32 or 127 <= ord(char) < 160 for char in value):
        raise ValueError("owner must not contain control characters")
    try:
        raw = value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("owner must be valid Unicode text") from None
    if len(raw) > MAX_OWNER_BYTES:
        raise ValueError(f"owner must be at most {MAX_OWNER_BYTES} bytes in UTF-8, got {len(raw)}")
    return b" " + raw
