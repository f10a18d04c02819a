"""Memory masters dressed as the suite's RedisServer objects, so that behavioural test modules
written for real servers run unchanged on hiredlock.testing's masters in memory.

MemoryServer(group, i): `.url` is the MemoryMaster itself (what a client is given), `.admin()` a
small redis-py-like client whose commands run on the master (the replies converted as redis-py
converts them), and stop() / cont() / kill() / restart() are the group's faults.
"""

from __future__ import annotations

from typing import Any

from hiredlock._engines.resp import ReplyError


class MemoryAdminError(Exception):
    """An error reply, as redis-py's ResponseError."""


class MemoryAdmin:
    def __init__(self, group, index: int) -> None:
        self._group = group
        self._index = index

    def execute_command(self, *args: Any) -> Any:
        reply = self._group.execute(self._index, *[_word(arg) for arg in args])
        if isinstance(reply, ReplyError):
            raise MemoryAdminError(reply.text)
        return reply

    def get(self, name):
        return self.execute_command("GET", name)

    def mget(self, *names):
        return [self.get(name) for name in names]

    def set(self, name, value, px=None, ex=None, nx=False):
        args = ["SET", name, value]
        if px is not None:
            args += ["PX", px]
        if ex is not None:
            args += ["EX", ex]
        if nx:
            args.append("NX")
        return True if self.execute_command(*args) is not None else None

    def delete(self, *names):
        return self.execute_command("DEL", *names)

    def exists(self, *names):
        return self.execute_command("EXISTS", *names)

    def pttl(self, name):
        return self.execute_command("PTTL", name)

    def pexpire(self, name, ms):
        return bool(self.execute_command("PEXPIRE", name, ms))

    def type(self, name):
        return bytes(self.execute_command("TYPE", name))

    def incr(self, name):
        return self.execute_command("INCR", name)

    def ping(self):
        return self.execute_command("PING") == b"PONG"

    def time(self):
        seconds, micros = self.execute_command("TIME")
        return int(seconds), int(micros)

    def zadd(self, name, mapping):
        args = ["ZADD", name]
        for member, score in mapping.items():
            args += [score, member]
        return self.execute_command(*args)

    def zrange(self, name, start, end, withscores=False):
        members = self.execute_command("ZRANGE", name, start, end)
        if not withscores:
            return members
        return [(member, self.zscore(name, member)) for member in members]

    def zscore(self, name, member):
        score = self.execute_command("ZSCORE", name, member)
        return None if score is None else float(score)

    def zcard(self, name):
        return self.execute_command("ZCARD", name)

    def dbsize(self):
        return self.execute_command("DBSIZE")

    def keys(self, pattern="*"):
        return self.execute_command("KEYS", pattern)

    def flushall(self):
        return self.execute_command("FLUSHALL") is not None

    def script_flush(self):
        return self.execute_command("SCRIPT", "FLUSH") is not None

    def scan_iter(self, count=None):
        return iter(self.keys())

    def client_list(self):
        return []  # (memory masters have no connections)

    def pubsub_numsub(self, *channels):
        return [(channel, self._group.subscribers(_word(channel))) for channel in channels]

    pubsub_shardnumsub = pubsub_numsub  # (memory masters have one kind of channel)

    def publish(self, channel, message):
        return self.execute_command("PUBLISH", channel, message)

    def spublish(self, channel, message):
        return self.execute_command("SPUBLISH", channel, message)

    def info(self, section=None):
        if section != "commandstats":
            raise NotImplementedError(f"INFO {section} on a memory master")
        calls = self._group[self._index].store.calls
        return {f"cmdstat_{name.decode().lower()}": {"calls": n} for name, n in calls.items()}

    def close(self) -> None:
        return None


class MemoryServer:
    """One memory master with the RedisServer interface the behavioural tests use."""

    def __init__(self, group, index: int) -> None:
        self.group = group
        self.index = index
        self.port = f"memory-{index}"  # (named in the tests' messages)

    @property
    def url(self):
        return self.group[self.index]

    def admin(self) -> MemoryAdmin:
        return MemoryAdmin(self.group, self.index)

    client = admin

    def alive(self) -> bool:
        return not self.group[self.index].killed

    def stop(self) -> None:
        self.group.stop(self.index)

    def cont(self) -> None:
        self.group.resume(self.index)

    def kill(self) -> None:
        self.group.kill(self.index)

    def restart(self) -> None:
        self.group.restart(self.index)

    def __repr__(self) -> str:
        return f"<MemoryServer {self.url}>"


def _word(arg: Any) -> bytes:
    if isinstance(arg, bytes):
        return arg
    if isinstance(arg, float) and arg.is_integer():
        return b"%d" % int(arg)
    return str(arg).encode()


def memory_servers(n: int = 5) -> list[MemoryServer]:
    from hiredlock.testing import memory_masters

    group = memory_masters(n)
    return [MemoryServer(group, index) for index in range(n)]
