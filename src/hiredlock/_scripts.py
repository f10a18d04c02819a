"""What the engines and the algorithm share, written once: Lua scripts, vote outcomes, the quorum
size and the constants. The judgement of votes and what follows a round are in _algorithm.py.
"""

from __future__ import annotations

import enum
import hashlib
from typing import NamedTuple, Optional


class Script(NamedTuple):
    """A Lua script as sent on the wire: EVALSHA with `sha`, EVAL with `source` on NOSCRIPT."""

    source: bytes
    sha: bytes


def _script(source: str) -> Script:
    raw = source.encode()
    return Script(raw, hashlib.sha1(raw).hexdigest().encode())


# Compare-then-delete: never removes a key that another holder set (KEYS[1] = key, ARGV[1] = token).
RELEASE = _script(
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('del', KEYS[1]) else return 0 end"
)

# Compare-then-pexpire: re-arms our own key only; a key that is gone stays gone (ARGV[2] = ttl ms).
EXTEND = _script(
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end"
)


# Fencing, round 1: take the lock and, only if it was taken, bump the name's counter (KEYS[2]).
# Returns the new counter, or 0 when the lock is held by another token. ARGV: token, ttl ms.
ACQUIRE_FENCED = _script(
    "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then "
    "return redis.call('incr', KEYS[2]) else return 0 end"
)

# Fencing, round 2: raise the counter to the fence handed out (never lower it), so that any later
# majority intersects masters that already count past it. ARGV[1] = fence. Returns 1.
RAISE_FENCE = _script(
    "local current = tonumber(redis.call('get', KEYS[1]) or '0') "
    "if current < tonumber(ARGV[1]) then redis.call('set', KEYS[1], ARGV[1]) end "
    "return 1"
)

# What a master holds for a name, packed in one integer so both engines read it the same way:
# 0 when the key is missing, else (pttl + 2) * 4 + ours * 2 + 1 (pttl -1: no expiry).
# ARGV[1] = token.
INSPECT = _script(
    "local kind = redis.call('type', KEYS[1])['ok'] "
    "if kind == 'none' then return 0 end "
    "local ours = 0 "
    "if kind == 'string' and redis.call('get', KEYS[1]) == ARGV[1] then ours = 1 end "
    "return (redis.call('pttl', KEYS[1]) + 2) * 4 + ours * 2 + 1"
)

# Deletes a key (a fence counter being retired). Returns 1 whether or not it existed, so that an
# answer counts as OK.
DELETE_KEY = _script("redis.call('del', KEYS[1]) return 1")

# Where the fencing counter of a lock name lives (no ttl: it must outlive every holder).
FENCE_KEY_PREFIX = b"hiredlock:fence:"


def fence_key(key: bytes) -> bytes:
    return FENCE_KEY_PREFIX + key


# Nothing: a round of it opens (and logs in) every master's connection. Returns 1 (its one
# argument is ignored: the engines send one at least).
PING = _script("return 1")

# A semaphore's attempt: takes the first of KEYS that is free (SET NX PX, ARGV[1] = token,
# ARGV[2] = ttl ms) and returns its position in KEYS (1-based), or 0 when every one is taken.
ACQUIRE_FIRST_FREE = _script(
    "for i, key in ipairs(KEYS) do "
    "if redis.call('set', key, ARGV[1], 'NX', 'PX', ARGV[2]) then return i end "
    "end return 0"
)

# A semaphore's permit i is a lock on its own key (see _lockbase.acquire_permit_steps).
PERMIT_KEY_PREFIX = b"hiredlock:permit:"
RESERVED_KEY_PREFIXES = (FENCE_KEY_PREFIX, PERMIT_KEY_PREFIX)


def permit_key(key: bytes, index: int) -> bytes:
    return PERMIT_KEY_PREFIX + b"%d:" % index + key


def unpack_inspect(value: int) -> tuple[bool, Optional[int], bool]:
    """(exists, pttl in ms or -1 without expiry or None when missing, ours) from INSPECT's reply."""
    if value <= 0:
        return False, None, False
    return True, (value >> 2) - 2, bool(value & 2)


class Outcome(enum.IntEnum):
    """What one master answered to one command in one round."""

    OK = 0  # SET applied, or the script acted on our key
    TAKEN = 1  # the master answered but refused: key held by another token, or not ours any more
    TIMEOUT = 2  # no answer within the per-master timeout
    CONN_ERROR = 3  # could not connect, or the connection broke
    ERROR = 4  # an error reply (WRONGTYPE, READONLY, NOAUTH, OOM, ...); its text is the detail
    SKIPPED = 5  # not waited for: the key's outcome was already decided by the other masters


# Outcomes that mean the master failed, rather than answered (OK/TAKEN) or was not waited for.
FAILURES = frozenset({Outcome.TIMEOUT, Outcome.CONN_ERROR, Outcome.ERROR})


# Bytes with these values are what the engines return per master; the native engine reads them here.
OUTCOME_CODES = {outcome.name: int(outcome) for outcome in Outcome}

TOKEN_BYTES = 20  # from the OS CSPRNG, sent as 40 hex characters

DEFAULT_DRIFT_FACTOR = 0.01
DRIFT_CONSTANT_MS = 2.0  # covers the granularity of the servers' expiry clocks

# Redis takes much longer PX values; 2**31 - 1 ms (about 24.8 days) keeps every client and server
# arithmetic in 32 bits, and no lock that must be renewed by hand should outlive it.
MAX_TTL_MS = 2**31 - 1

# Default per-master wait: a fraction of the ttl, bounded so that a dead master costs little.
MASTER_TIMEOUT_FRACTION = 0.05
MASTER_TIMEOUT_MIN_MS = 5.0
MASTER_TIMEOUT_MAX_MS = 50.0

# After a failure, acquire does not reconnect to that master for this long, doubling up to the max.
RECONNECT_BACKOFF_MIN_MS = 10
RECONNECT_BACKOFF_MAX_MS = 500

# A connection opened in a round has at least this long from the round's start to connect, log in
# and answer, whatever the per-master timeout: a new connection (slowed by a busy GIL, say) must not
# cost a healthy master its vote. Masters connected before the round keep the per-master timeout.
CONNECT_TIMEOUT_MIN_MS = 100.0

# The largest reply a lock command may get (a lock reply is a few bytes; INSPECT an integer): a
# larger one fails that master's vote and drops its connection.
MAX_REPLY_BYTES = 64 * 1024

# A connection that owes this many replies to abandoned rounds is dropped rather than drained.
MAX_STALE_REPLIES = 256


def quorum(n_masters: int) -> int:
    return n_masters // 2 + 1
