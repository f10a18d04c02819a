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
6. For a read-write lock (RWJudge): the writers' and the readers' occupancies, both read at every
   entry in one atomic step on the judge; a writer together with any other holder (a second
   writer, or a reader) is a violation, readers together are not (their largest number is
   recorded: the workload must show that they did overlap).  Writers update the lost-update
   counter; a reader reads it on entry and on exit, and a change (a writer wrote while it read)
   is a torn read.  The interval oracle's rw variant (rw_interval_violations) pairs a writer with
   anyone else.
7. For a fair lock: the order oracle.  Each acquire() call takes a request stamp first: a
   RequestGate on the judge lets the calls of every process through at least `gap` ms apart (on
   the judge's clock), and the caller reads time.time_ns() right after, just before acquire()
   (the clock the library orders its calls by).  order_inversions() then pairs every call b that
   got the lock with each call a requested >= 10 ms before it (README "Fair lock": the guarantee
   holds for calls made >= 10 ms apart) that was still waiting when b's acquire() returned.

The Judge class is used by the worker processes and by the test process alike.
"""

from __future__ import annotations

import bisect
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


# KEYS: writers in, readers in, violations, writers max, readers max, holders max, log.
# ARGV: role ("w" or "r"), who.  Both occupancies are counted and read in this one step, so an
# entry sees exactly who is inside.  Returns {writers, readers, 1 if a violation else 0}.
_RW_ENTER = """
local w = tonumber(redis.call('get', KEYS[1]) or '0')
local r = tonumber(redis.call('get', KEYS[2]) or '0')
if ARGV[1] == 'w' then w = w + 1 redis.call('set', KEYS[1], w)
else r = r + 1 redis.call('set', KEYS[2], r) end
local bad = 0
if w > 1 or (w > 0 and r > 0) then
  bad = 1
  redis.call('incr', KEYS[3])
  redis.call('rpush', KEYS[7], ARGV[2] .. ' (' .. ARGV[1] .. ') entered: writers ' .. w
    .. ', readers ' .. r)
  redis.call('ltrim', KEYS[7], 0, 49)
end
if w > tonumber(redis.call('get', KEYS[4]) or '0') then redis.call('set', KEYS[4], w) end
if r > tonumber(redis.call('get', KEYS[5]) or '0') then redis.call('set', KEYS[5], r) end
if w + r > tonumber(redis.call('get', KEYS[6]) or '0') then redis.call('set', KEYS[6], w + r) end
return {w, r, bad}
"""


class RWJudge(Judge):
    """The judge of a read-write lock's name (oracle 6): enter(role) / exit(role) with role "w"
    (a writer) or "r" (a reader).  The counter, the fenced register and the verdict's keys are
    Judge's ("occupancy_violations": entries that saw a writer with another holder,
    "occupancy_max": the most holders at once), plus writer_max, reader_max and torn_reads."""

    def __init__(self, url: str, name: str) -> None:
        super().__init__(url, name, limit=1)
        p = f"judge:{name}:"
        self.k_w, self.k_r = p + "writers", p + "readers"
        self.k_wmax, self.k_rmax = p + "writers_max", p + "readers_max"
        self.k_log, self.k_torn = p + "violation_log", p + "torn_reads"
        self.k_went, self.k_rent = p + "write_entries", p + "read_entries"
        self._rw_enter = self.r.register_script(_RW_ENTER)

    def enter(self, role: str = "w", who: str = "") -> tuple[int, int, bool]:
        """(writers, readers, violation) as this holder entered."""
        self.r.incr(self.k_entries)
        self.r.incr(self.k_went if role == "w" else self.k_rent)
        keys = [self.k_w, self.k_r, self.k_viol, self.k_wmax, self.k_rmax, self.k_max, self.k_log]
        w, r, bad = self._rw_enter(keys=keys, args=[role, who])
        return int(w), int(r), bool(bad)

    def exit(self, role: str = "w") -> None:
        self.r.decr(self.k_w if role == "w" else self.k_r)

    def torn_read(self) -> None:
        self.r.incr(self.k_torn)

    def verdict(self) -> dict:
        v = super().verdict()
        g = self.r.get
        v.update(
            writer_max=int(g(self.k_wmax) or 0),
            reader_max=int(g(self.k_rmax) or 0),
            write_entries=int(g(self.k_went) or 0),
            read_entries=int(g(self.k_rent) or 0),
            writers_now=int(g(self.k_w) or 0),
            readers_now=int(g(self.k_r) or 0),
            torn_reads=int(g(self.k_torn) or 0),
            violation_log=[x.decode() for x in self.r.lrange(self.k_log, 0, 20)],
        )
        return v


# KEYS: the last pass (judge's clock, us), the passes so far.  ARGV: the gap in us.  Returns
# {sequence number, 0} when the caller may go, else {-1, microseconds to wait}.
_GATE = """
local t = redis.call('time')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local last = tonumber(redis.call('get', KEYS[1]) or '0')
if now - last < tonumber(ARGV[1]) then return {-1, tonumber(ARGV[1]) - (now - last)} end
redis.call('set', KEYS[1], now)
return {redis.call('incr', KEYS[2]), 0}
"""


class RequestGate:
    """The fair lock's request schedule (oracle 7), shared by every process contending for one
    name: wait() returns once `gap_ms` passed on the judge's clock since the previous caller
    went, with the caller's sequence number.  Callers stamp their request right after it, so
    their calls are about `gap_ms` apart (whatever each thread's scheduling delay adds)."""

    def __init__(self, url: str, name: str, gap_ms: float) -> None:
        self.r = redis.Redis.from_url(url, socket_timeout=30, socket_connect_timeout=10)
        self.keys = [f"judge:{name}:gate_last", f"judge:{name}:gate_seq"]
        self.gap_us = int(gap_ms * 1000)
        self._gate = self.r.register_script(_GATE)

    def wait(self) -> int:
        while True:
            seq, wait_us = self._gate(keys=self.keys, args=[self.gap_us])
            if int(seq) >= 0:
                return int(seq)
            time.sleep(int(wait_us) / 1e6)

    def close(self) -> None:
        self.r.close()


class Request(NamedTuple):
    """One acquire() call of a fair lock's workload (oracle 7), on time.time_ns()'s clock."""

    requested_ns: int  # just before acquire() was called (after the RequestGate)
    done_ns: int  # when acquire() returned
    granted: bool
    who: str = ""
    seq: int = 0  # the RequestGate's sequence number


# The README's guarantee: calls made at least this far apart are granted in the order made.
ORDER_GAP_NS = 10_000_000


def order_inversions(requests, gap_ns: int = ORDER_GAP_NS) -> list[tuple[Request, Request]]:
    """Pairs (a, b): b got the lock (its acquire() returned True) while a, requested at least
    gap_ns before b, was still waiting (a's acquire() returned later, granted or not).  Holders
    exclude each other, so for two granted calls this is "b was granted before a"; a call that
    gave up (its deadline, an error) counts as overtaken by every such b too."""
    reqs = sorted((r if isinstance(r, Request) else Request(*r) for r in requests), key=_req)
    starts = [r.requested_ns for r in reqs]
    longest = max((r.done_ns - r.requested_ns for r in reqs), default=0)
    out = []
    for b in reqs:
        if not b.granted:
            continue
        # a: requested by b.requested_ns - gap_ns, and no earlier than `longest` before b's grant
        lo = bisect.bisect_left(starts, b.done_ns - longest)
        hi = bisect.bisect_right(starts, b.requested_ns - gap_ns)
        out += [(a, b) for a in reqs[lo:hi] if a.done_ns > b.done_ns]
    return out


def _req(r: Request) -> int:
    return r.requested_ns


def order_report(requests, gap_ns: int = ORDER_GAP_NS) -> dict:
    """The order oracle's numbers: requests; pairs judged (requested >= gap_ns apart, the
    earlier one still waiting when the later one was made: the pairs whose order the lock
    decided); inversions (order_inversions) and the requests they overtook; close pairs
    (consecutive requests < gap_ns apart: not judged); the most calls waiting in acquire() at
    once (> 1: a queue did form); a sample of the inversions."""
    reqs = sorted((r if isinstance(r, Request) else Request(*r) for r in requests), key=_req)
    starts = [r.requested_ns for r in reqs]
    longest = max((r.done_ns - r.requested_ns for r in reqs), default=0)
    judged = 0
    for i, b in enumerate(reqs):
        lo = bisect.bisect_left(starts, b.requested_ns - longest, 0, i)
        hi = bisect.bisect_right(starts, b.requested_ns - gap_ns, 0, i)
        judged += sum(1 for a in reqs[lo:hi] if a.done_ns > b.requested_ns)
    close = sum(1 for a, b in zip(starts, starts[1:]) if b - a < gap_ns)
    events = sorted([(r.requested_ns, 1) for r in reqs] + [(r.done_ns, -1) for r in reqs])
    waiting = waiting_max = 0
    for _t, step in events:
        waiting += step
        waiting_max = max(waiting_max, waiting)
    inv = order_inversions(reqs, gap_ns)
    t0 = starts[0] if starts else 0
    sample = [
        f"{a.who}#{a.seq} asked at +{(a.requested_ns - t0) / 1e6:.1f} ms, "
        f"{'granted' if a.granted else 'gave up'} at +{(a.done_ns - t0) / 1e6:.1f} ms; "
        f"{b.who}#{b.seq} asked at +{(b.requested_ns - t0) / 1e6:.1f} ms, "
        f"granted at +{(b.done_ns - t0) / 1e6:.1f} ms"
        for a, b in inv[:5]
    ]
    return {
        "requests": len(reqs),
        "judged_pairs": judged,
        "inversions": len(inv),
        "overtaken": len({(a.who, a.seq, a.requested_ns) for a, _b in inv}),
        "close_pairs": close,
        "waiting_max": waiting_max,
        "sample": sample,
    }


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


# A read-write lock's intervals are named <name>:w (a writer's) or <name>:r (a reader's).
RW_ROLE_SUFFIXES = (":w", ":r")


def rw_interval_violations(records) -> list[tuple[Interval, Interval]]:
    """For read-write locks (intervals named <name>:w and <name>:r): pairs of a writer and
    another holder (writer or reader) of one name whose intervals overlap; readers may."""
    by_name: dict[str, tuple[list, list]] = {}
    for r in records:
        r = r if isinstance(r, Interval) else Interval(*r)
        base, role = r.name[:-2], r.name[-2:]
        if role not in RW_ROLE_SUFFIXES:
            raise ValueError(f"not a read-write interval: {r.name!r}")
        by_name.setdefault(base, ([], []))[role == ":r"].append(r)
    out = []
    for writers, readers in by_name.values():
        out += interval_violations(writers)
        readers.sort(key=lambda r: r.acquired_at)
        starts = [r.acquired_at for r in readers]
        longest = max((r.end - r.acquired_at for r in readers), default=0)
        for w in writers:
            # the readers that may overlap w started before w's end and less than the longest
            # reader's span before w started
            lo = bisect.bisect_left(starts, w.acquired_at - longest)
            hi = bisect.bisect_left(starts, w.end)
            out += [(w, r) for r in readers[lo:hi] if r.end > w.acquired_at and r.token != w.token]
    return out


def now_ns() -> int:
    return time.monotonic_ns()


# -- leak scan ----------------------------------------------------------------------------------

FENCE_PREFIX = b"hiredlock:fence:"
RW_READERS_PREFIX = b"hiredlock:rw:r:"
RW_MARK_PREFIXES = (b"hiredlock:rw:ww:", b"hiredlock:rw:rw:", b"hiredlock:rw:rp:")
FAIR_QUEUE_PREFIXES = (b"hiredlock:fair:q:", b"hiredlock:fair:e:")


def leak_scan(
    servers,
    ttl_ms: int,
    since_ns: int,
    rw_window_ms: Optional[int] = None,
    fair_window_ms: Optional[int] = None,
) -> list[str]:
    """Problems left on the masters (live servers only).  Every key is scanned (lock keys, a
    semaphore's permit keys hiredlock:permit:<i>:<name>, a read-write lock's keys
    hiredlock:rw:*:<name>, anything else), and reported when it is:

    * a key without a TTL, other than the persistent fencing counters hiredlock:fence:*;
    * a key that will outlive `ttl_ms` after `since_ns` (the last release and heal), i.e.
      whose PTTL now is more than ttl_ms minus the time elapsed since then;
    * an entry of a read-write lock's readers set (hiredlock:rw:r:<name>, a sorted set of
      token -> expiry on the master's clock) that will outlive the ttl likewise (each reader
      expires on its own; the key lives as long as its longest reader);
    * a read-write lock's waiting mark or readers' pass (hiredlock:rw:ww:, rw:, rp: + name)
      whose PTTL is above `rw_window_ms` (when given), the waiting window the scripts set them
      for.  The marks are allowed otherwise: a refused attempt leaves them on purpose, and they
      expire on their own within the window (as the README says); the writer's key
      hiredlock:rw:w:<name> is a lock key and falls under the ttl rule above;
    * a fair lock's queue keys (hiredlock:fair:q:, fair:e: + name) whose PTTL is above
      `fair_window_ms` (when given), the waiting window.  They are allowed otherwise: a waiter
      whose leaving did not reach a master (faulted then) stays in that master's queue, and
      every attempt renews both keys for one window, so they expire on their own within one
      window after the last waiter (README "Fair lock").  (A fair lock's own key is the name's,
      a lock key.)
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
            marks = rw_window_ms is not None and key.startswith(RW_MARK_PREFIXES)
            if marks and pttl > rw_window_ms:
                problems.append(
                    f"port {srv.port}: {key!r} PTTL {pttl} ms > the {rw_window_ms} ms window"
                )
            queue = fair_window_ms is not None and key.startswith(FAIR_QUEUE_PREFIXES)
            if queue and pttl > fair_window_ms:
                problems.append(
                    f"port {srv.port}: {key!r} PTTL {pttl} ms > the {fair_window_ms} ms window"
                )
            if key.startswith(RW_READERS_PREFIX):
                problems += _reader_entry_leaks(a, srv.port, key, ttl_ms, since_ns)
    return problems


def _reader_entry_leaks(a, port, key: bytes, ttl_ms: int, since_ns: int) -> list[str]:
    """The entries of a readers set that outlive the ttl after since_ns (on the master's clock)."""
    try:
        entries = a.zrange(key, 0, -1, withscores=True)
    except redis.ResponseError as exc:  # not a sorted set: the library wrote something else
        return [f"port {port}: {key!r} is not a readers set: {exc}"]
    secs, usecs = a.time()
    master_now_ms = secs * 1000 + usecs // 1000
    left = ttl_ms - (time.monotonic_ns() - since_ns) / 1e6
    return [
        f"port {port}: reader {token!r} of {key!r} expires in {score - master_now_ms:.0f} ms"
        f" > {left:.0f} ms left of the ttl"
        for token, score in entries
        if score - master_now_ms > left + 1
    ]


def keys_with_prefix(servers, prefix: str) -> dict[int, list[bytes]]:
    out = {}
    for srv in servers:
        if srv.alive:
            keys = list(srv.admin().scan_iter(match=prefix + "*", count=1000))
            if keys:
                out[srv.port] = keys
    return out
