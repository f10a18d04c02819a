"""One master's keyspace in memory: the commands hiredlock sends, with no I/O and no clock.

`MemoryStore.execute(args, now_ms)` runs one command as a Redis master would at the time now_ms
(the masters' clock is the caller's: keys expire by it) and gives its reply as the engines read
one: bytes (a simple or bulk string), int, None (nil), a list, or a ReplyError. Scripts run on
lupa's Lua 5.1 (the language Redis embeds), so the library's own scripts run here as they do on a
server, with Redis's conversions between Lua and replies.

Supported: the strings and sorted-set commands the scripts in hiredlock._core.scripts call, SET
with NX/XX/PX/EX, EVAL, EVALSHA, SCRIPT LOAD/FLUSH/EXISTS, PING, AUTH, SELECT, PUBLISH, SPUBLISH,
TIME, and a few more for tests (GET, DEL, EXISTS, PTTL, PEXPIRE, TYPE, INCR, KEYS, DBSIZE,
FLUSHALL). Only database 0 exists; AUTH accepts anything (the masters run in the test's own
process).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any, Callable, Optional, Union

from .._engines.resp import ReplyError

try:
    from lupa import lua51 as _lua  # type: ignore[import-untyped]
except ImportError as _exc:  # pragma: no cover - the message is the point
    raise ImportError("hiredlock.testing needs lupa: pip install 'hiredlock[testing]'") from _exc

Reply = Union[bytes, int, None, list[Any], ReplyError]

WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
_NOT_INTEGER = "ERR value is not an integer or out of range"
_NOT_FLOAT = "ERR min or max is not a float"
_SYNTAX = "ERR syntax error"
# The commands execute() runs itself, not through the command table: a script may not call them.
_NOT_FROM_SCRIPTS = frozenset((b"EVAL", b"EVALSHA", b"SCRIPT", b"AUTH", b"SELECT"))

# Inside a script: redis.call raises the error reply as a Lua error (a table, so that the
# script's error reply is the command's own); redis.pcall returns it as {err=...}.
_PRELUDE = b"""
local dispatch = ...
redis = {}
redis.pcall = function(...) return dispatch(...) end
redis.call = function(...)
  local reply = dispatch(...)
  if type(reply) == 'table' and reply.err then error(reply, 0) end
  return reply
end
redis.error_reply = function(text) return {err = text} end
redis.status_reply = function(text) return {ok = text} end
redis.log = function() end
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
redis.sha1hex = function(text) return dispatch('__sha1hex', text) end
return function(f, keys, argv)
  KEYS, ARGV = keys, argv
  return pcall(f)
end
"""


class _Key:
    __slots__ = ("expires", "kind", "value")

    def __init__(self, kind: str, value: Any, expires: Optional[int] = None) -> None:
        self.kind = kind  # "string" or "zset"
        self.value = value  # bytes, or {member: score}
        self.expires = expires  # ms on the masters' clock, or None


class MemoryStore:
    """One master's keys and script cache (see the module doc). Not thread-safe: its caller
    runs one command at a time."""

    def __init__(self) -> None:
        self.on_publish: Optional[Callable[[bytes, bytes], Optional[int]]] = None
        # commands run, by name (upper case), scripts' own calls included (as INFO commandstats)
        self.calls: dict[bytes, int] = {}
        self._keys: dict[bytes, _Key] = {}
        self._scripts: dict[bytes, Any] = {}  # sha -> the compiled Lua function
        self._now = 0
        self._lua = _lua.LuaRuntime(encoding=None, register_eval=False)
        self._run = self._lua.execute(_PRELUDE, self._from_script)
        self._commands: dict[bytes, Callable[[list[bytes]], Reply]] = {
            b"GET": self._get,
            b"SET": self._set,
            b"DEL": self._del,
            b"EXISTS": self._exists,
            b"TYPE": self._type,
            b"PTTL": self._pttl,
            b"PEXPIRE": self._pexpire,
            b"INCR": self._incr,
            b"ZADD": self._zadd,
            b"ZREM": self._zrem,
            b"ZSCORE": self._zscore,
            b"ZRANGE": self._zrange,
            b"ZRANGEBYSCORE": self._zrangebyscore,
            b"ZREMRANGEBYSCORE": self._zremrangebyscore,
            b"ZCOUNT": self._zcount,
            b"ZCARD": self._zcard,
            b"TIME": self._time,
            b"PUBLISH": self._publish,
            b"SPUBLISH": self._publish,
            b"PING": self._ping,
            b"KEYS": self._keys_command,
            b"DBSIZE": lambda args: len(self._live_keys()),
            b"FLUSHALL": self._flushall_command,
        }

    # -- the interface --------------------------------------------------------------------------

    def execute(self, args: Sequence[bytes], now_ms: int) -> Reply:
        """Runs one command at the masters' time now_ms; gives its reply."""
        self._now = int(now_ms)
        if not args:
            return ReplyError("ERR empty command")
        name = bytes(args[0]).upper()
        rest = [bytes(arg) for arg in args[1:]]
        if name in _NOT_FROM_SCRIPTS:
            self.calls[name] = self.calls.get(name, 0) + 1
        if name in (b"EVAL", b"EVALSHA"):
            return self._eval(name, rest)
        if name == b"SCRIPT":
            return self._script(rest)
        if name == b"AUTH":
            return _OK
        if name == b"SELECT":
            return _OK if rest == [b"0"] else ReplyError("ERR DB index is out of range")
        return self._call(name, rest)

    def flushall(self) -> None:
        """Forgets every key and script: a master restarted without persistence."""
        self._keys.clear()
        self._scripts.clear()

    def script_flush(self) -> None:
        """Forgets the cached scripts (SCRIPT FLUSH): the next EVALSHA gets NOSCRIPT."""
        self._scripts.clear()

    def keys(self, now_ms: int) -> list[bytes]:
        """The keys that have not expired at now_ms."""
        self._now = int(now_ms)
        return self._live_keys()

    # -- commands -------------------------------------------------------------------------------

    def _call(self, name: bytes, args: list[bytes]) -> Reply:
        self.calls[name] = self.calls.get(name, 0) + 1
        command = self._commands.get(name)
        if command is None:
            return ReplyError(f"ERR unknown command '{name.decode(errors='replace').lower()}'")
        try:
            return command(args)
        except IndexError:
            return ReplyError(
                f"ERR wrong number of arguments for '{name.decode().lower()}' command"
            )
        except _Error as exc:
            return ReplyError(exc.text)

    def _lookup(self, key: bytes, kind: Optional[str] = None) -> Optional[_Key]:
        entry = self._keys.get(key)
        if entry is None:
            return None
        if entry.expires is not None and entry.expires <= self._now:
            del self._keys[key]
            return None
        if kind is not None and entry.kind != kind:
            raise _Error(WRONGTYPE)
        return entry

    def _live_keys(self) -> list[bytes]:
        return [key for key in list(self._keys) if self._lookup(key) is not None]

    def _get(self, args: list[bytes]) -> Reply:
        _arity(args, 1)
        entry = self._lookup(args[0], "string")
        return None if entry is None else entry.value

    def _set(self, args: list[bytes]) -> Reply:
        key, value = args[0], args[1]
        nx = xx = False
        expires: Optional[int] = None
        options = iter(args[2:])
        for option in options:
            word = option.upper()
            if word == b"NX":
                nx = True
            elif word == b"XX":
                xx = True
            elif word in (b"PX", b"EX"):
                amount = _integer(next(options, None), "ERR syntax error")
                if amount <= 0:
                    raise _Error("ERR invalid expire time in 'set' command")
                expires = self._now + (amount if word == b"PX" else amount * 1000)
            else:
                raise _Error(_SYNTAX)
        if nx and xx:
            raise _Error(_SYNTAX)
        exists = self._lookup(key) is not None
        if (nx and exists) or (xx and not exists):
            return None
        self._keys[key] = _Key("string", value, expires)
        return _OK

    def _del(self, args: list[bytes]) -> Reply:
        _arity(args, 1, many=True)
        count = 0
        for key in args:
            if self._lookup(key) is not None:
                del self._keys[key]
                count += 1
        return count

    def _exists(self, args: list[bytes]) -> Reply:
        _arity(args, 1, many=True)
        return sum(self._lookup(key) is not None for key in args)

    def _type(self, args: list[bytes]) -> Reply:
        _arity(args, 1)
        entry = self._lookup(args[0])
        return _Status(b"none" if entry is None else entry.kind.encode())

    def _pttl(self, args: list[bytes]) -> Reply:
        _arity(args, 1)
        entry = self._lookup(args[0])
        if entry is None:
            return -2
        return -1 if entry.expires is None else entry.expires - self._now

    def _pexpire(self, args: list[bytes]) -> Reply:
        _arity(args, 2)
        amount = _integer(args[1], _NOT_INTEGER)
        entry = self._lookup(args[0])
        if entry is None:
            return 0
        if amount <= 0:
            del self._keys[args[0]]
        else:
            entry.expires = self._now + amount
        return 1

    def _incr(self, args: list[bytes]) -> Reply:
        _arity(args, 1)
        entry = self._lookup(args[0], "string")
        value = 1 if entry is None else _integer(entry.value, _NOT_INTEGER) + 1
        if entry is None:
            self._keys[args[0]] = _Key("string", b"%d" % value)
        else:
            entry.value = b"%d" % value
        return value

    def _zset(self, key: bytes) -> Optional[dict[bytes, float]]:
        entry = self._lookup(key, "zset")
        return None if entry is None else entry.value

    def _zadd(self, args: list[bytes]) -> Reply:
        key = args[0]
        rest = args[1:]
        xx = nx = False
        while rest and rest[0].upper() in (b"XX", b"NX"):
            xx = xx or rest[0].upper() == b"XX"
            nx = nx or rest[0].upper() == b"NX"
            rest = rest[1:]
        if not rest or len(rest) % 2:
            raise _Error(_SYNTAX)
        pairs = [
            (_score(rest[i], "ERR value is not a valid float"), rest[i + 1])
            for i in range(0, len(rest), 2)
        ]
        members = self._zset(key)
        added = 0
        for score, member in pairs:
            if members is None:
                if xx:
                    continue
                members = {}
                self._keys[key] = _Key("zset", members)
            if member in members:
                if not nx:
                    members[member] = score
            elif not xx:
                members[member] = score
                added += 1
        return added

    def _zrem(self, args: list[bytes]) -> Reply:
        _arity(args, 2, many=True)
        members = self._zset(args[0])
        if members is None:
            return 0
        removed = sum(members.pop(member, None) is not None for member in args[1:])
        self._drop_if_empty(args[0], members)
        return removed

    def _zscore(self, args: list[bytes]) -> Reply:
        _arity(args, 2)
        members = self._zset(args[0])
        if members is None or args[1] not in members:
            return None
        return _format_score(members[args[1]])

    def _zcard(self, args: list[bytes]) -> Reply:
        _arity(args, 1)
        members = self._zset(args[0])
        return 0 if members is None else len(members)

    def _zrange(self, args: list[bytes]) -> Reply:
        if len(args) != 3:
            raise _Error(_SYNTAX) if len(args) > 3 else IndexError()
        members = self._zset(args[0])
        start, stop = _integer(args[1], _NOT_INTEGER), _integer(args[2], _NOT_INTEGER)
        if members is None:
            return []
        ranked = _ranked(members)
        count = len(ranked)
        start = max(start + count if start < 0 else start, 0)
        stop = stop + count if stop < 0 else min(stop, count - 1)
        return [member for member, _ in ranked[start : stop + 1]]

    def _in_range(self, args: list[bytes]) -> list[tuple[bytes, float]]:
        _arity(args, 3)
        members = self._zset(args[0])
        if members is None:
            return []
        low, low_open = _bound(args[1])
        high, high_open = _bound(args[2])
        return [
            (member, score)
            for member, score in _ranked(members)
            if (score > low if low_open else score >= low)
            and (score < high if high_open else score <= high)
        ]

    def _zrangebyscore(self, args: list[bytes]) -> Reply:
        return [member for member, _ in self._in_range(args)]

    def _zcount(self, args: list[bytes]) -> Reply:
        return len(self._in_range(args))

    def _zremrangebyscore(self, args: list[bytes]) -> Reply:
        gone = self._in_range(args)
        if not gone:
            return 0
        members = self._zset(args[0])
        assert members is not None
        for member, _ in gone:
            del members[member]
        self._drop_if_empty(args[0], members)
        return len(gone)

    def _drop_if_empty(self, key: bytes, members: dict[bytes, float]) -> None:
        if not members:
            del self._keys[key]

    def _time(self, args: list[bytes]) -> Reply:
        _arity(args, 0)
        return [b"%d" % (self._now // 1000), b"%d" % (self._now % 1000 * 1000)]

    def _publish(self, args: list[bytes]) -> Reply:
        _arity(args, 2)
        receivers = None if self.on_publish is None else self.on_publish(args[0], args[1])
        return receivers or 0

    def _ping(self, args: list[bytes]) -> Reply:
        if len(args) > 1:
            raise IndexError()
        return args[0] if args else _Status(b"PONG")

    def _keys_command(self, args: list[bytes]) -> Reply:
        _arity(args, 1)
        if args[0] != b"*":
            raise _Error("ERR only KEYS * is supported by memory masters")
        return sorted(self._live_keys())

    def _flushall_command(self, args: list[bytes]) -> Reply:
        self._keys.clear()
        return _OK

    # -- scripts --------------------------------------------------------------------------------

    def _script(self, args: list[bytes]) -> Reply:
        if not args:
            return ReplyError("ERR wrong number of arguments for 'script' command")
        sub = args[0].upper()
        if sub == b"LOAD" and len(args) == 2:
            sha, error = self._compile(args[1])
            return sha if error is None else error
        if sub == b"FLUSH":
            self.script_flush()
            return _OK
        if sub == b"EXISTS" and len(args) > 1:
            return [int(sha.lower() in self._scripts) for sha in args[1:]]
        return ReplyError(f"ERR unknown subcommand '{args[0].decode(errors='replace')}'")

    def _compile(self, source: bytes) -> tuple[bytes, Optional[ReplyError]]:
        sha = hashlib.sha1(source).hexdigest().encode()
        if sha not in self._scripts:
            try:
                self._scripts[sha] = self._lua.execute(b"return function() " + source + b"\nend")
            except _lua.LuaSyntaxError as exc:
                return sha, ReplyError(f"ERR Error compiling script (new function): {exc}")
        return sha, None

    def _eval(self, name: bytes, args: list[bytes]) -> Reply:
        if len(args) < 2:
            return ReplyError(
                f"ERR wrong number of arguments for '{name.decode().lower()}' command"
            )
        try:
            numkeys = int(args[1])
        except ValueError:
            return ReplyError(_NOT_INTEGER)
        if numkeys < 0:
            return ReplyError("ERR Number of keys can't be negative")
        if numkeys > len(args) - 2:
            return ReplyError("ERR Number of keys can't be greater than number of args")
        if name == b"EVAL":
            sha, error = self._compile(args[0])
            if error is not None:
                return error
        else:
            sha = args[0].lower()
            if sha not in self._scripts:
                return ReplyError("NOSCRIPT No matching script. Please use EVAL.")
        keys = self._lua.table_from(args[2 : 2 + numkeys])
        argv = self._lua.table_from(args[2 + numkeys :])
        ok, result = self._run(self._scripts[sha], keys, argv)
        if ok:
            return self._to_reply(result)
        if _lua_type(result) == "table" and result[b"err"] is not None:
            return ReplyError(_text(result[b"err"]))
        return ReplyError(f"ERR user_script:1: {_text(result)} script: {sha.decode()}")

    def _from_script(self, *args: Any) -> Any:
        """redis.call / redis.pcall: runs a command for a script; its reply as Lua sees it."""
        if not args:
            return self._lua.table_from({b"err": b"ERR Please specify at least one argument"})
        words = []
        for arg in args:
            if isinstance(arg, bytes):
                words.append(arg)
            elif isinstance(arg, (int, float)) and not isinstance(arg, bool):
                words.append(_format_number(arg))
            else:
                return self._lua.table_from(
                    {b"err": b"ERR Lua redis lib command arguments must be strings or integers"}
                )
        name = words[0].upper()
        if name == b"__SHA1HEX":
            return hashlib.sha1(words[1]).hexdigest().encode()
        if name in _NOT_FROM_SCRIPTS:
            return self._lua.table_from(
                {b"err": b"ERR This Redis command is not allowed from script"}
            )
        return self._to_lua(self._call(name, words[1:]))

    def _to_lua(self, reply: Reply) -> Any:
        if isinstance(reply, ReplyError):
            return self._lua.table_from({b"err": reply.text.encode()})
        if isinstance(reply, _Status):
            return self._lua.table_from({b"ok": bytes(reply)})
        if reply is None:
            return False
        if isinstance(reply, list):
            return self._lua.table_from([self._to_lua(item) for item in reply])
        return reply

    def _to_reply(self, value: Any) -> Reply:
        """A script's Lua value as its reply (Redis's conversion: numbers are truncated to
        integers, true is 1, false and nil are nil, a table is an array up to its first nil
        unless it is {ok=...} or {err=...})."""
        if value is None or value is False:
            return None
        if value is True:
            return 1
        if isinstance(value, (int, float)):
            return int(value)
        if isinstance(value, bytes):
            return value
        if _lua_type(value) == "table":
            err = value[b"err"]
            if err is not None:
                return ReplyError(_text(err))
            ok = value[b"ok"]
            if ok is not None:
                return bytes(ok)
            items = []
            index = 1
            while value[index] is not None:
                items.append(self._to_reply(value[index]))
                index += 1
            return items
        return None


class _Status(bytes):
    """A status reply (+OK): a script sees it as {ok=...}; callers of execute see bytes."""


_OK = _Status(b"OK")


class _Error(Exception):
    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def _lua_type(value: Any) -> Optional[str]:
    return _lua.lua_type(value)  # type: ignore[no-any-return]


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _arity(args: list[bytes], n: int, many: bool = False) -> None:
    if len(args) < n or (not many and len(args) != n):
        raise IndexError()


def _integer(raw: Optional[bytes], error: str) -> int:
    try:
        if raw is None or raw.strip() != raw:
            raise ValueError
        return int(raw)
    except ValueError:
        raise _Error(error) from None


def _score(raw: bytes, error: str) -> float:
    word = raw.lower()
    if word in (b"+inf", b"inf"):
        return math.inf
    if word == b"-inf":
        return -math.inf
    try:
        value = float(raw)
    except ValueError:
        raise _Error(error) from None
    if math.isnan(value):
        raise _Error(error)
    return value


def _bound(raw: bytes) -> tuple[float, bool]:
    if raw.startswith(b"("):
        return _score(raw[1:], _NOT_FLOAT), True
    return _score(raw, _NOT_FLOAT), False


def _ranked(members: dict[bytes, float]) -> list[tuple[bytes, float]]:
    return sorted(members.items(), key=lambda item: (item[1], item[0]))


def _format_score(score: float) -> bytes:
    if math.isinf(score):
        return b"inf" if score > 0 else b"-inf"
    if score.is_integer() and abs(score) < 1e17:
        return b"%d" % int(score)
    return repr(score).encode()


def _format_number(value: Union[int, float]) -> bytes:
    """A Lua number passed to redis.call, as Redis turns it into an argument (%.17g)."""
    if isinstance(value, int) or value.is_integer():
        return b"%d" % int(value)
    return b"%.17g" % value
