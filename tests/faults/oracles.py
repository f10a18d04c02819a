"""Oracles: independent judges of mutual exclusion.  None of them trusts the library.

1. Interval oracle: every holder logs (name, token, holder, acquired_at, valid_until, released_at)
   on CLOCK_MONOTONIC (one clock for every process of this machine).  Two holders of one name whose
   [acquired_at, min(released_at, valid_until)] overlap are a violation.
2. Occupancy counter on the judge server (a redis-server no fault touches): INCR on entry to the
   critical section, DECR on exit; every entry that sees a value above the judge's limit (1 for a
   lock; a semaphore's permits) is a violation.  The largest value seen is recorded too.
3. Lost-update counter on the judge: GET, work, SET under the lock; at the end the counter equals
   the number of completed sections.
4. Fenced register on the judge: accepts a write only with a fence >= the last accepted one; a
   rejected write is counted.
5. Leak scan of the masters after a scenario (see leak_scan).

The Judge class is used by the worker processes and by the test process alike.
"""

from __future__ import annotations

import time
from typing import NamedTuple, Optional

import redis

# KEYS: occupancy, violations, max seen.  ARGV: the limit.  Returns the occupancy after the
# increment.
_ENTER = """
local v = redis.call('incr', KEYS[1])
if v > tonumber(ARGV[1]) then redis.call('incr', KEYS[2]) end
if v > tonumber(redis.call('get', KEYS[3]) or '0') then redis.call('set', KEYS[3], v) end
return v
"""

# KEYS: register, rejections, log.  ARGV: fence, writer.  1 when accepted, 0 when refused.
_FENCED_WRITE = """
local last = tonumber(redis.call('get', KEYS[1]) or '-1')
local fence = tonumber(ARGV[1])
if fence >= last then
  redis.call('set', KEYS[1], ARGV[1])
  return 1
end
redis.call('incr', KEYS[2])
redis.call('rpush', KEYS[3], ARGV[2] .. ' fence ' .. ARGV[1] .. ' < ' .. tostring(last))
return 0
"""


class Judge:
    """The judge's side of the oracles 2-4, for one lock name (or a semaphore's name: `limit`,
    the holders allowed at once, is then its permits)."""

    def __init__(self, url: str, name: str, limit: int = 1) -> None:
        self.r = redis.Redis.from_url(url, socket_timeout=30, socket_connect_timeout=10)
        self.name = name
        self.limit = limit
        p = f"judge:{name}:"
        self.k_occ, self.k_viol, self.k_max = p + "occ", p + "occ_violations", p + "occ_max"
        self.k_cnt, self.k_done = p + "counter", p + "completed"
        self.k_reg, self.k_rej, self.k_rejlog = p + "register", p + "rejected", p + "rejected_log"
        self.k_entries = p + "entries"
        self._enter = self.r.register_script(_ENTER)
        self._fenced = self.r.register_script(_FENCED_WRITE)

    def enter(self) -> int:
        self.r.incr(self.k_entries)
        return int(self._enter(keys=[self.k_occ, self.k_viol, self.k_max], args=[self.limit]))

    def exit(self) -> None:
        self.r.decr(self.k_occ)

    def read_counter(self) -> int:
        return int(self.r.get(self.k_cnt) or 0)

    def write_counter(self, value: int) -> None:
        self.r.set(self.k_cnt, value)
        self.r.incr(self.k_done)

    def fenced_write(self, fence: int, writer: str) -> bool:
        return bool(
            int(self._fenced(keys=[self.k_reg, self.k_rej, self.k_rejlog], args=[fence, writer]))
        )

    def verdict(self) -> dict:
        g = self.r.get
        return {
            "entries": int(g(self.k_entries) or 0),
            "occupancy_violations": int(g(self.k_viol) or 0),
            "occupancy_max": int(g(self.k_max) or 0),
            "occupancy_now": int(g(self.k_occ) or 0),
            "counter": int(g(self.k_cnt) or 0),
            "completed": int(g(self.k_done) or 0),
            "fence_rejections": int(g(self.k_rej) or 0),
            "fence_rejection_log": [x.decode() for x in self.r.lrange(self.k_rejlog, 0, 20)],
        }

    def close(self) -> None:
        self.r.close()


class Interval(NamedTuple):
    name: str
    token: str
    holder: str
    acquired_at: int  # CLOCK_MONOTONIC ns, when acquire() returned True
    valid_until: int  # acquired_at + the validity the lock reported then
    released_at: Optional[int]  # just before release() was called (None: never released)
    fence: Optional[int] = None

    @property
    def end(self) -> int:
        return (
            self.valid_until
            if self.released_at is None
            else min(self.released_at, self.valid_until)
        )


def interval_violations(records) -> list[tuple[Interval, Interval]]:
    """Pairs of holders of one name whose [acquired_at, end] intervals overlap."""
    by_name: dict[str, list[Interval]] = {}
    for r in records:
        r = r if isinstance(r, Interval) else Interval(*r)
        by_name.setdefault(r.name, []).append(r)
    out = []
    for items in by_name.values():
        items.sort(key=lambda r: r.acquired_at)
        latest: Optional[Interval] = None  # the interval reaching furthest so far
        for r in items:
            if latest is not None and r.acquired_at < latest.end and r.token != latest.token:
                out.append((latest, r))
            if latest is None or r.end > latest.end:
                latest = r
    return out


def now_ns() -> int:
    return time.monotonic_ns()


# -- leak scan ----------------------------------------------------------------------------------

FENCE_PREFIX = b"hiredlock:fence:"


def leak_scan(servers, ttl_ms: int, since_ns: int) -> list[str]:
    """Problems left on the masters (live servers only).  Every key is scanned (lock keys, a
    semaphore's permit keys hiredlock:permit:<i>:<name>, anything else), and reported when it is:

    * a key without a TTL, other than the persistent fencing counters hiredlock:fence:*;
    * a key that will outlive `ttl_ms` after `since_ns` (the last release and heal), i.e.
      whose PTTL now is more than ttl_ms minus the time elapsed since then.
    """
    problems = []
    for srv in servers:
        if not srv.alive:
            continue
        a = srv.admin()
        for key in a.scan_iter(count=1000):
            if key.startswith(FENCE_PREFIX):
                continue
            pttl = a.pttl(key)
            if pttl == -2:
                continue  # expired meanwhile
            if pttl == -1:
                problems.append(f"port {srv.port}: {key!r} has no TTL")
                continue
            left = ttl_ms - (time.monotonic_ns() - since_ns) / 1e6
            if pttl > left + 1:
                problems.append(
                    f"port {srv.port}: {key!r} PTTL {pttl} ms > {left:.0f} ms left of the ttl"
                )
    return problems


def keys_with_prefix(servers, prefix: str) -> dict[int, list[bytes]]:
    out = {}
    for srv in servers:
        if srv.alive:
            keys = list(srv.admin().scan_iter(match=prefix + "*", count=1000))
            if keys:
                out[srv.port] = keys
    return out
