"""What the engines and the algorithm share, written once: Lua scripts, vote outcomes, the quorum
size and the constants. The judgement of votes and what follows a round are in _core/judgement.py.
"""

from __future__ import annotations

import enum
import hashlib
from typing import NamedTuple, Optional


class Script(NamedTuple):
    """A Lua script as sent on the wire: EVALSHA with `sha`, EVAL with `source` on NOSCRIPT.

    acquires: the script takes something (a lock, a permit, a place). Its reply, when a master
    gives it after the round ended and it says NOSCRIPT, is dropped: the attempt's unlock may
    have run on that master already, and running the acquire then would leave a key nobody
    holds. Any other script (a release, an extend, an unlock) is sent again as EVAL then, so
    that it still runs on a master that answered late."""

    source: bytes
    sha: bytes
    acquires: bool


def _script(source: str, *, acquires: bool = False) -> Script:
    raw = source.encode()
    return Script(raw, hashlib.sha1(raw).hexdigest().encode(), acquires)


def _announce(channel: str) -> str:
    """(Lua: publishes a release on the channel the caller passed, `channel` (an ARGV): waiters
    subscribe to the channel of the name they wait for (see _engines/notices.py, and
    _core/keys.py for where it is). SPUBLISH, the sharded publish of Redis 7 and later, which a
    cluster delivers on the node of the channel's slot alone; PUBLISH where the master does not
    know it (the subscribers do the same). pcall: a user whose ACL does not allow the channel
    still releases; its waiters fall back to their timer.)"""
    return (
        f"if type(redis.pcall('spublish', {channel}, '')) == 'table' then "
        f"redis.pcall('publish', {channel}, '') end "
    )


# Compare-then-delete: never removes a key that another holder set (KEYS[1] = key, ARGV[1] =
# token); a release is announced to the waiters (ARGV[2] = the name's channel).
RELEASE = _script(
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "redis.call('del', KEYS[1]) " + _announce("ARGV[2]") + "return 1 else return 0 end"
)

# The unlock after a failed attempt: RELEASE (the same arguments), and when the key is not ours,
# when it frees itself: 0 when it is missing, -1 when it has no expiry, else -2 - its pttl (see
# free_in_ms).
RELEASE_AFTER_FAILURE = _script(
    "local holder = redis.call('get', KEYS[1]) "
    "if holder == ARGV[1] then redis.call('del', KEYS[1]) " + _announce("ARGV[2]") + "return 1 end "
    "if not holder then return 0 end "
    "local pttl = redis.call('pttl', KEYS[1]) "
    "if pttl < 0 then return -1 end "
    "return -2 - pttl"
)


# Compare-then-pexpire: re-arms our own key only; a key that is gone stays gone (ARGV[2] = ttl ms).
EXTEND = _script(
    "if redis.call('get', KEYS[1]) == ARGV[1] then "
    "return redis.call('pexpire', KEYS[1], ARGV[2]) else return 0 end"
)


# A round of many names for one of the scripts above (the releases of 100 tasks, a release_many, a
# renewal of many locks) goes to a standalone master as a few commands, not one per name: each
# runs the script for up to SCRIPT_BATCH_ITEMS names in turn (one EVALSHA costs the server about
# as much as the script's own work; one per name is a quarter of its time per lock cycle). The
# engines do it (see the engine contract's run); a name's vote is the same as its own EVALSHA's.
SCRIPT_BATCH_ITEMS = 64


def _batched(item: Script) -> Script:
    """(Lua: runs `item` for each of the names of the call, in order. KEYS: the names' keys back
    to back, ARGV[1] of them each; ARGV[2:]: their other arguments back to back. The reply is an
    array of each name's reply; a name whose script raised (a WRONGTYPE key) has its error there,
    so the error stays that name's and the others still run. Each name's KEYS and ARGV are the
    same two tables, refilled: the scripts batched keep no reference to them.)"""
    return _script(
        "local function item(KEYS, ARGV) " + item.source.decode() + " end "
        "local per_key = tonumber(ARGV[1]) "
        "local count = #KEYS / per_key "
        "local per_arg = (#ARGV - 1) / count "
        "local replies, keys, args = {}, {}, {} "
        "for i = 0, count - 1 do "
        "for j = 1, per_key do keys[j] = KEYS[i * per_key + j] end "
        "for j = 1, per_arg do args[j] = ARGV[1 + i * per_arg + j] end "
        "local ran, reply = pcall(item, keys, args) "
        "if not ran then "
        "reply = {err = type(reply) == 'table' and reply.err or tostring(reply)} "
        "elseif reply == nil then reply = false end "
        "replies[i + 1] = reply end "
        "return replies",
        acquires=item.acquires,
    )


# The scripts an engine may run batched (their sha -> the batching script): scripts of one name
# each (numkeys >= 1) that reply with an integer or nil.
BATCHED = {item.sha: _batched(item) for item in (RELEASE, RELEASE_AFTER_FAILURE, EXTEND)}


# A multilock (see _core/multilocks.py): KEYS = its names' keys, ARGV[1] = token. Each master
# takes all of them or none (a script runs alone), so its vote is the whole lock's.
# Taking: SET NX PX each (ARGV[2] = ttl ms); where one is held, the ones set are deleted: 0.
MULTI_ACQUIRE = _script(
    "for i, key in ipairs(KEYS) do "
    "if not redis.call('set', key, ARGV[1], 'NX', 'PX', ARGV[2]) then "
    "for j = 1, i - 1 do redis.call('del', KEYS[j]) end return 0 end "
    "end return 1",
    acquires=True,
)

# Releasing (or unlocking after a failed attempt): deletes each key that is ours and announces
# it on its name's channel (ARGV[1 + i]: KEYS[i]'s); 1 when all of them were ours.
MULTI_RELEASE = _script(
    "local ours = 0 "
    "for i, key in ipairs(KEYS) do "
    "if redis.call('get', key) == ARGV[1] then redis.call('del', key) ours = ours + 1 "
    + _announce("ARGV[i + 1]")
    + "end "
    "end if ours == #KEYS then return 1 end return 0"
)

# Extending (ARGV[2] = ttl ms): only where every key is still ours (a key that is gone stays
# gone, and the others are not re-armed without it).
MULTI_EXTEND = _script(
    "for _, key in ipairs(KEYS) do "
    "if redis.call('get', key) ~= ARGV[1] then return 0 end end "
    "for _, key in ipairs(KEYS) do redis.call('pexpire', key, ARGV[2]) end return 1"
)

# A multilock's check(): how long every key still lives (the shortest PTTL) + 1, or 0 when one of
# them is not ours (as CHECK for one key).
MULTI_CHECK = _script(
    "local least = 2147483647 "
    "for _, key in ipairs(KEYS) do "
    "if redis.call('type', key)['ok'] ~= 'string' "
    "or redis.call('get', key) ~= ARGV[1] then return 0 end "
    "local pttl = redis.call('pttl', key) "
    "if pttl >= 0 and pttl < least then least = pttl end "
    "end return least + 1"
)

# Fencing, round 1: take the lock and, only if it was taken, bump the name's counter (KEYS[2]).
# Returns the new counter, or 0 when the lock is held by another token. ARGV: token, ttl ms.
ACQUIRE_FENCED = _script(
    "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then "
    "return redis.call('incr', KEYS[2]) else return 0 end",
    acquires=True,
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

# Nothing: a round of it opens (and logs in) every master's connection. Returns 1 (its one
# argument is ignored: the engines send one at least).
PING = _script("return 1")

# (Lua: the semaphore's size record, KEYS[#KEYS], says ARGV[3] permits and lives at least ARGV[2]
# ms from now: as long as the permit just taken or renewed.)
_KEEP_SIZE = (
    "local size_key = KEYS[#KEYS] "
    "if redis.call('pttl', size_key) < tonumber(ARGV[2]) then "
    "redis.call('set', size_key, ARGV[3], 'PX', ARGV[2]) end "
)

# A semaphore's attempt. KEYS: some of its permits, then its size record (NameKeys.permit_size);
# ARGV: token, ttl ms, the number of permits the caller asks for. Where the record says another
# number, takes nothing and returns minus that number. Else takes the first of the permits that
# is free (SET NX PX), keeps the record as long as it, and returns its position in KEYS
# (1-based), or 0 when every one is taken.
ACQUIRE_FIRST_FREE = _script(
    "local stored = redis.call('get', KEYS[#KEYS]) "
    "if stored and stored ~= ARGV[3] then return -(tonumber(stored) or 1) end "
    "for i = 1, #KEYS - 1 do "
    "if redis.call('set', KEYS[i], ARGV[1], 'NX', 'PX', ARGV[2]) then "
    + _KEEP_SIZE
    + "return i end "
    "end return 0",
    acquires=True,
)

# A permit's extend: EXTEND's (KEYS[1] = the permit, ARGV[1] = token, ARGV[2] = ttl ms), and
# the size record (KEYS[2]; ARGV[3] = the number of permits) kept at least as long.
PERMIT_EXTEND = _script(
    "if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end "
    "redis.call('pexpire', KEYS[1], ARGV[2]) " + _KEEP_SIZE + "return 1"
)

# The scripts that go through a semaphore's permits make each permit's key from the prefix and
# suffix they are given (NameKeys.permit_parts: permit i is prefix .. i .. suffix). Those keys are
# not in KEYS, but they are in the slot of the keys that are (see _core/keys.py), which is what a
# cluster asks of a script; the layout itself stays in keys.py.

# A permit's release (and the unlock of permits an attempt set): RELEASE's (KEYS[1] = the permit,
# ARGV[1] = token, ARGV[2] = the semaphore's channel), and where it deleted the permit and none of
# the semaphore's permits is left (ARGV[3], ARGV[4]: the permits' key prefix and suffix), the size
# record (KEYS[2]) goes with it: the next holder may ask for another size. (A scan of the permits
# that stops at the first one held.)
PERMIT_RELEASE = _script(
    "if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end "
    "redis.call('del', KEYS[1]) "
    "local size = tonumber(redis.call('get', KEYS[2]) or '0') or 0 "
    "local left = 0 "
    "for i = 0, math.min(size, 1000) - 1 do "
    "if redis.call('exists', ARGV[3] .. i .. ARGV[4]) == 1 then "
    "left = 1 break end end "
    "if left == 0 then redis.call('del', KEYS[2]) end " + _announce("ARGV[2]") + "return 1"
)

# The state of a semaphore on one master: 0 without a size record, else its size * 1024 + how
# many of its permits are held there. KEYS: the size record; ARGV: the permits' key prefix and
# suffix.
INSPECT_PERMITS = _script(
    "local size = tonumber(redis.call('get', KEYS[1]) or '0') or 0 "
    "if size < 1 then return 0 end "
    "local held = 0 "
    "for i = 0, math.min(size, 1000) - 1 do "
    "held = held + redis.call('exists', ARGV[1] .. i .. ARGV[2]) end "
    "return math.min(size, 1000) * 1024 + held"
)


def unpack_inspect_permits(value: int) -> tuple[Optional[int], Optional[int]]:
    """(the semaphore's size, its permits held) from INSPECT_PERMITS' reply (None, None when the
    master has no size record for the name)."""
    if value <= 0:
        return None, None
    return value >> 10, value & 1023


# A read-write lock's keys on each master (see _core/rwlocks.py): the writer's token (a string with
# its ttl), the readers (a sorted set: token -> when it expires, on the master's clock), a writer
# waiting (holds back new readers), readers waiting, and the readers' pass (after a writer's
# release, the readers that waited go before the next writer): NameKeys.rw.
# The read-write lock's scripts: KEYS are those, in that order; ARGV[1] = token, ARGV[2] = ttl
# ms, ARGV[3] = the waiting window in ms (how long a waiting writer holds back new readers, and
# how long readers that waited for a writer may pass a writer waiting after its release: a waiter
# tries again well within it, woken or by its timer), ARGV[4] = the pass's grace in ms (below),
# ARGV[5] = the channel its releases are announced on (NameKeys.rw_channel), ARGV[6] (the undos')
# whether the attempt failed ("1") or was abandoned ("0").
# Readers' expiries are on the master's clock.
_NOW = "local t = redis.call('time') local now = t[1] * 1000 + math.floor(t[2] / 1000) "

# A reader: refused while a writer holds the lock, or waits for it (unless the readers' pass is
# on: the first reader through it cuts it to ARGV[4] ms, time enough for the others woken by the
# same release); then added with its own expiry (the set lives as long as its longest reader).
READ_ACQUIRE = _script(
    _NOW + "if redis.call('exists', KEYS[1]) == 1 then "
    "redis.call('set', KEYS[4], '1', 'px', ARGV[3]) return 0 end "
    "local pass = redis.call('pttl', KEYS[5]) "
    "if pass < 0 and redis.call('exists', KEYS[3]) == 1 then "
    "redis.call('set', KEYS[4], '1', 'px', ARGV[3]) return 0 end "
    "if pass > tonumber(ARGV[4]) then redis.call('pexpire', KEYS[5], ARGV[4]) end "
    "redis.call('zremrangebyscore', KEYS[2], '-inf', now) "
    "redis.call('zadd', KEYS[2], now + ARGV[2], ARGV[1]) "
    "if redis.call('pttl', KEYS[2]) < tonumber(ARGV[2]) then "
    "redis.call('pexpire', KEYS[2], ARGV[2]) end "
    "return 1",
    acquires=True,
)

# A writer: refused while a writer or a live reader holds the lock, or during the readers' pass,
# and then it waits (holding back new readers); else it takes the lock.
WRITE_ACQUIRE = _script(
    _NOW + "redis.call('zremrangebyscore', KEYS[2], '-inf', now) "
    "if redis.call('exists', KEYS[1]) == 1 or redis.call('exists', KEYS[2]) == 1 "
    "or redis.call('exists', KEYS[5]) == 1 then "
    "redis.call('set', KEYS[3], ARGV[1], 'px', ARGV[3]) return 0 end "
    "redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2]) "
    "if redis.call('get', KEYS[3]) == ARGV[1] then redis.call('del', KEYS[3]) end "
    "return 1",
    acquires=True,
)

# A writer's release: readers that waited get their pass; announced.
WRITE_RELEASE = _script(
    "if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end "
    "redis.call('del', KEYS[1]) "
    "if redis.call('exists', KEYS[4]) == 1 then "
    "redis.call('set', KEYS[5], '1', 'px', ARGV[3]) redis.call('del', KEYS[4]) end "
    + _announce("ARGV[5]")
    + "return 1"
)

# A reader's release (only while it is live: an expired reader is not released, it was lost);
# the last reader's ends the readers' pass (nobody is inside: a writer may go) and is announced.
READ_RELEASE = _script(
    _NOW + "local expiry = redis.call('zscore', KEYS[2], ARGV[1]) "
    "redis.call('zremrangebyscore', KEYS[2], '-inf', now) "
    "if not expiry or tonumber(expiry) <= now then return 0 end "
    "redis.call('zrem', KEYS[2], ARGV[1]) "
    "if redis.call('exists', KEYS[2]) == 0 then redis.call('del', KEYS[5]) "
    + _announce("ARGV[5]")
    + "end "
    "return 1"
)

# The unlock after a failed attempt (ARGV[6] = "1") or an abandoned one ("0": an exception
# interrupted it) takes back only what the attempt put there: it neither opens nor ends a readers'
# pass (only a writer that held the lock opens one, only the last reader inside ends it). A failed
# attempt marks its waiter here too, as the masters that refused it did, so that every master it
# reached sees the same waiters (the marks of a caller that gives up expire within the window, as
# a refusal's do); an abandoned writer takes its waiting mark back.
# Under a stopped minority every live master is needed, and marks and passes that differ from
# master to master would keep readers and writers splitting them.
WRITE_UNDO = _script(
    "local ours = redis.call('get', KEYS[1]) == ARGV[1] "
    "if ours then redis.call('del', KEYS[1]) end "
    "if ARGV[6] == '1' then redis.call('set', KEYS[3], ARGV[1], 'px', ARGV[3]) "
    "elseif redis.call('get', KEYS[3]) == ARGV[1] then redis.call('del', KEYS[3]) end "
    "if ours then " + _announce("ARGV[5]") + "return 1 end return 0"
)

READ_UNDO = _script(
    _NOW + "redis.call('zremrangebyscore', KEYS[2], '-inf', now) "
    "local ours = redis.call('zrem', KEYS[2], ARGV[1]) == 1 "
    "if ARGV[6] == '1' then redis.call('set', KEYS[4], '1', 'px', ARGV[3]) end "
    "if not ours then return 0 end "
    "if redis.call('exists', KEYS[2]) == 0 then " + _announce("ARGV[5]") + "end "
    "return 1"
)

# (A writer's extend is EXTEND's, on KEYS[1].) A reader's extend: a live reader gets a new
# expiry (an expired one is not revived).
READ_EXTEND = _script(
    _NOW + "local expiry = redis.call('zscore', KEYS[2], ARGV[1]) "
    "if not expiry or tonumber(expiry) <= now then return 0 end "
    "redis.call('zadd', KEYS[2], 'xx', now + ARGV[2], ARGV[1]) "
    "if redis.call('pttl', KEYS[2]) < tonumber(ARGV[2]) then "
    "redis.call('pexpire', KEYS[2], ARGV[2]) end "
    "return 1"
)


# A holder's check (lock.check()): how long its key lives still, where it holds our token:
# PTTL + 1 (a key without expiry counts as MAX_TTL_MS), else 0. ARGV[1] = token.
CHECK = _script(
    "if redis.call('type', KEYS[1])['ok'] ~= 'string' "
    "or redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end "
    "local pttl = redis.call('pttl', KEYS[1]) "
    "if pttl < 0 then pttl = 2147483647 end "
    "return pttl + 1"
)

# A reader's check: how long it stays live (its expiry on the master's clock, less now) + 1, or 0
# (KEYS[1] = the readers' set).
READ_CHECK = _script(
    _NOW + "local expiry = redis.call('zscore', KEYS[1], ARGV[1]) "
    "if not expiry or tonumber(expiry) <= now then return 0 end "
    "return tonumber(expiry) - now + 1"
)

# An owner label is stored after the holder's token (a space between: see
# validation.owner_label). The engines read integer replies only, so inspect() reads the label of
# a name's holder in chunks of OWNER_CHUNK bytes, each packed after a leading 1 (it fits a Lua
# number exactly): KEYS = the name's key and its read-write lock's writer key (the first that
# holds a string is read), ARGV[1] = the chunk's offset. 0: no label there; 1: past its end.
OWNER_CHUNK = 6
OWNER_FULL_CHUNK = 1 << (8 * OWNER_CHUNK)  # a reply at least this large holds a whole chunk
OWNER_PART = _script(
    "local value = nil "
    "for i = 1, 2 do if redis.call('type', KEYS[i])['ok'] == 'string' then "
    "value = redis.call('get', KEYS[i]) break end end "
    "if not value or #value <= 41 or string.sub(value, 41, 41) ~= ' ' then return 0 end "
    "local from = 42 + tonumber(ARGV[1]) "
    "local part = string.sub(value, from, from + 5) "
    "local packed = 1 "
    "for i = 1, #part do packed = packed * 256 + string.byte(part, i) end "
    "return packed"
)


def unpack_owner(parts: list[int]) -> Optional[str]:
    """The owner label from OWNER_PART's replies for offsets 0, OWNER_CHUNK, ... (None: none)."""
    if not parts or parts[0] <= 1:
        return None
    raw = bytearray()
    for packed in parts:
        chunk = bytearray()
        while packed > 1:
            chunk.insert(0, packed & 0xFF)
            packed >>= 8
        if not chunk:
            break
        raw += chunk
    return raw.decode("utf-8", "replace")


# An operator's removal of a name (Redlock.force_release): deletes KEYS[1] (ARGV[1] = "0") or,
# for ARGV[1] = N > 0, the N permits of the semaphore named KEYS[1] (ARGV[4], ARGV[5]: the
# permits' key prefix and suffix; the name's key itself is not touched then); returns how many
# keys it removed and, when any, announces a release on the channels ARGV[2] and ARGV[3] (the
# lock's and the read-write lock's) so waiters try again.
FORCE_DELETE = _script(
    "local removed = 0 "
    "local permits = tonumber(ARGV[1]) "
    "if permits == 0 then removed = redis.call('del', KEYS[1]) else "
    "for i = 0, permits - 1 do "
    "removed = removed + redis.call('del', ARGV[4] .. i .. ARGV[5]) end end "
    "if removed > 0 then " + _announce("ARGV[2]") + _announce("ARGV[3]") + "end return removed"
)


# The other kinds' state of a name on one master, packed in one integer: KEYS = the read-write
# lock's writer and readers (NameKeys.rw[:2]), the fair lock's queue and expiries (NameKeys.fair).
# writer (0/1) + 2 * live readers + 2**22 * live waiters of the fair lock (counts capped below
# 2**21 each).
INSPECT_KINDS = _script(
    _NOW + "local cap = 2097151 "
    "local readers = math.min(cap, redis.call('zcount', KEYS[2], '(' .. now, '+inf')) "
    "local waiting = math.min(cap, redis.call('zcount', KEYS[4], '(' .. now, '+inf')) "
    "return redis.call('exists', KEYS[1]) + 2 * readers + 4194304 * waiting"
)


def unpack_inspect_kinds(value: int) -> tuple[bool, int, int]:
    """(a writer holds the read-write lock, its live readers, the fair lock's live waiters)."""
    return bool(value & 1), (value >> 1) & 0x1FFFFF, value >> 22


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
# Dropping it loses the order of its commands against a new connection's (a stopped master that
# resumes may run an unlock sent on the new one before the SET it undoes, buffered on the old
# one), so the bound is high: 40 waiters retrying against a stopped master reach 256 in well
# under a second. Each reply owed keeps at most its command's EVAL (a few hundred bytes).
MAX_STALE_REPLIES = 4096

# How long the clean-up round after an interruption (a Ctrl-C, a cancelled task) waits for the
# masters' replies, at most: its unlocks are written to every master and need no answer (a
# stopped master runs them when it resumes, behind what it had), so the interruption is not held
# for a whole master timeout.
CLEANUP_WAIT_MS = 100.0


def quorum(n_masters: int) -> int:
    return n_masters // 2 + 1


# (Lua: queues the ticket ARGV[3] under its order ARGV[4] for the waiting window ARGV[5] ms. The
# queue's keys live as long as the longest window of the waiters touching them: never shortened
# by a client whose own window is shorter.)
_FAIR_QUEUE = (
    "redis.call('zadd', KEYS[2], ARGV[4], ARGV[3]) "
    "redis.call('zadd', KEYS[3], now + ARGV[5], ARGV[3]) "
    "for i = 2, 3 do if redis.call('pttl', KEYS[i]) < tonumber(ARGV[5]) then "
    "redis.call('pexpire', KEYS[i], ARGV[5]) end end "
)

# (Lua: forgets the waiters whose place ran out.)
_FAIR_FORGET = (
    "local gone = redis.call('zrangebyscore', KEYS[3], '-inf', now) "
    "for _, ticket in ipairs(gone) do redis.call('zrem', KEYS[2], ticket) end "
    "redis.call('zremrangebyscore', KEYS[3], '-inf', now) "
)

# A fair lock's attempt. KEYS: the lock, the queue, the expiries; ARGV: token, ttl ms, ticket,
# order, the waiting window ms, and the name's channel (for FAIR_UNDO, which takes the same).
# Forgets the waiters whose time ran out, (re)queues this one for the window, and takes the
# lock only when this waiter is first in the queue and it is free.
# Where it takes the lock, the ticket's place lasts only as long as the key it took (the window
# at most; 1 ms less: it never outlives that key on this master's clock): a
# holder that never releases holds the next waiter back until its key expires, not a window
# past its attempt. The ticket stays queued otherwise until the call ends (the release or the
# leave takes it out), and an attempt that took a minority of the masters gets its full place
# back there with its unlock (FAIR_UNDO): a waiter keeps its place on every master.
FAIR_ACQUIRE = _script(
    _NOW
    + _FAIR_FORGET
    + _FAIR_QUEUE
    + "if redis.call('zrange', KEYS[2], 0, 0)[1] ~= ARGV[3] then return 0 end "
    "if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then "
    "redis.call('zadd', KEYS[3], now + math.min(tonumber(ARGV[2]), tonumber(ARGV[5])) - 1, "
    "ARGV[3]) return 1 end "
    "return 0",
    acquires=True,
)

# The unlock after a fair lock's failed attempt (FAIR_ACQUIRE's KEYS and ARGV):
# RELEASE_AFTER_FAILURE's, with the same replies, but for two things. Where the key was ours, the
# ticket is queued for the window again (its place had been cut to the key's life): it tries
# again from that place. Where the key is missing and the ticket is first in line, the reply is
# -2 (a PTTL of 0), not 0: the key, or a waiter ahead, that refused the attempt went since, and
# the waiter tries again at once; a waiter that is not first waits for a notice or its timer.
FAIR_UNDO = _script(
    _NOW + _FAIR_FORGET + "local holder = redis.call('get', KEYS[1]) "
    "if holder == ARGV[1] then redis.call('del', KEYS[1]) "
    + _FAIR_QUEUE
    + _announce("ARGV[6]")
    + "return 1 end "
    "if not holder then "
    "if redis.call('zrange', KEYS[2], 0, 0)[1] == ARGV[3] then return -2 end "
    "return 0 end "
    "local pttl = redis.call('pttl', KEYS[1]) "
    "if pttl < 0 then return -1 end "
    "return -2 - pttl"
)

# A fair lock's release, or a waiter leaving the queue (token ""): the ticket leaves the queue,
# the lock is deleted if it is ours; either is announced (the next waiter may go). ARGV: token,
# ticket, the name's channel.
FAIR_RELEASE = _script(
    "local left = redis.call('zrem', KEYS[2], ARGV[2]) redis.call('zrem', KEYS[3], ARGV[2]) "
    "local ours = redis.call('get', KEYS[1]) == ARGV[1] "
    "if ours then redis.call('del', KEYS[1]) end "
    "if ours or left == 1 then " + _announce("ARGV[3]") + "end "
    "if ours then return 1 end return 0"
)
