"""The per-master rules, once, for every connection hiredlock makes: what a round is told about each
master before it starts, and what it does with what the round reports about each master after.

Rules (each here and nowhere else):
    backoff     a connection that failed is opened again after a pause that doubles with each
                failure in a row, from a minimum to a maximum, and is reset once a connection
                comes up (Backoff; the release-notice subscribers use it too)
    honour_backoff  an acquire does not wait for (or reconnect to) a master in its pause, nor does
                the unlock after a failed attempt when nothing could have reached that master
                (its failure came before anything was written): those vote CONN_ERROR with the
                last failure's reason. Release and extend rounds always try.
    lagging     a master a round ended on at or past its bound while it still owed replies is
                lagging until it has caught up (a reply of a later round read, nothing owed at a
                later round's start, or a new connection): wait-all rounds do not wait for it
                once their outcome is decided (see the stop rules of _engines/contract.py)
    READONLY    a master known by a place (a host name, a Sentinel group) that answers READONLY
                is a replica now: its connection goes and the resolver is asked again
    failover    a Sentinel group's master is compared with what the sentinels name now (at most
                every SENTINEL_CHECK_S); its connection goes when they name another, or none
    moved       a master with a place that failed may have moved: the resolver is asked again;
                a Redis Cluster's node that failed has the cluster's slot map asked again (a
                failover may have made its replica the primary: see _engines/routing.py)

How a round of either engine uses it (one MasterPolicy per engine: python_engine.py and round.py;
_native/master.pxi and round.pxi), as bit masks (bit i: master i), so that a healthy round costs
nothing:
    before: `policy.lagging` (not waited for once decided), `policy.skipped(now, set_round)`
            when the round honours the backoff and `policy.down` is not 0, and
            `policy.follow(now, addresses)` when `now >= policy.next_follow`
    after:  the round keeps the masks of MasterReport's fields while it runs; only when one is
            not 0 (`troubled`) does it hand them over: `policy.settle(report)` returns the
            masters whose connection goes now (READONLY).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple, Optional

from .._core.places import SentinelGroup
from .._core.scripts import RECONNECT_BACKOFF_MAX_MS, RECONNECT_BACKOFF_MIN_MS
from . import resolver as _resolver

_SENTINEL_CHECK_NS = int(_resolver.SENTINEL_CHECK_S * 1e9)


class Backoff:
    """A reconnect pause that doubles with each failure in a row, from `low` to `high`, in the
    unit of the clock its caller reads (the engines: ns; the notice subscribers: seconds)."""

    __slots__ = ("high", "low", "pause", "until")

    def __init__(self, low: float, high: float) -> None:
        self.low = low
        self.high = high
        self.pause: float = 0
        self.until: float = 0  # no reconnect before this

    def failed(self, now: float, pause: Optional[float] = None) -> None:
        """Another failure in a row: the pause grows; `pause` overrides how long this one is."""
        self.pause = min(self.high, max(self.low, self.pause * 2))
        self.until = now + (self.pause if pause is None else pause)

    def succeeded(self) -> None:
        """A connection came up: the next failure pauses for `low` again."""
        self.pause = 0

    def waiting(self, now: float) -> bool:
        return now < self.until


class MasterReport(NamedTuple):
    """What a round tells the policy about its masters, as bit masks (bit i: master i)."""

    failed: int  # failed in the round (a connection error, or a connect that timed out)
    unreached: int  # of those, failed before anything was written to them
    up: int  # a connection came up (a connect, a TLS handshake, completed)
    lagged: int  # the round ended at or past their bound with replies still owed
    caught_up: int  # lagging ones that caught up (or have a new connection)
    readonly: int  # answered READONLY
    reasons: dict[int, tuple[int, str]]  # failed master -> (when, in ns, why)


class MasterPolicy:
    """The per-master state behind the rules above, for one engine's masters (`places[i]`: what
    the resolver looks up for master i, or None)."""

    __slots__ = (
        "backoffs",
        "down",
        "follow_after",
        "lagging",
        "last_error",
        "next_follow",
        "places",
        "router",
        "sentinels",
        "unreached",
    )

    def __init__(self, places: Sequence[Any], router: Any = None) -> None:
        n = len(places)
        self.places = tuple(places)
        self.router = router  # the engine's routing table (_engines/routing.py), if any
        self.backoffs = [
            Backoff(RECONNECT_BACKOFF_MIN_MS * 1_000_000, RECONNECT_BACKOFF_MAX_MS * 1_000_000)
            for _ in range(n)
        ]
        self.last_error = [""] * n  # why a skipped master votes CONN_ERROR
        self.down = 0  # masters with a pause that may not be over
        self.unreached = 0  # masters whose last failure came before anything was written
        self.lagging = 0
        self.sentinels = [i for i, place in enumerate(places) if isinstance(place, SentinelGroup)]
        self.follow_after = [0] * n
        self.next_follow: float = 0 if self.sentinels else math.inf

    def skipped(self, now: int, set_round: bool) -> int:
        """The masters a round that honours the backoff does not reconnect (see honour_backoff):
        all those in their pause for a SET round, the unreached ones for a script."""
        skip = 0
        down = self.down
        for i, backoff in enumerate(self.backoffs):
            if down >> i & 1:
                if backoff.waiting(now):
                    skip |= 1 << i
                else:
                    down &= ~(1 << i)
        self.down = down
        return skip if set_round else skip & self.unreached

    def follow(self, now: int, addresses: Sequence[Any]) -> int:
        """The Sentinel-group masters whose connection must go before this round (see failover):
        `addresses[i]` is where master i's connection goes, None without one. A cache read:
        _resolver asks the sentinels in the background."""
        after = self.follow_after
        due = [i for i in self.sentinels if addresses[i] is not None and now >= after[i]]
        drop = 0
        if due:
            answers = _resolver.lookup_many([self.places[i] for i in due], 0.0)
            for i, answer in zip(due, answers):
                self.follow_after[i] = now + _SENTINEL_CHECK_NS
                if isinstance(answer, str) or answer != addresses[i]:
                    drop |= 1 << i
        self.next_follow = min(self.follow_after[i] for i in self.sentinels)
        return drop

    def settle(self, report: MasterReport) -> int:
        """Takes in a troubled round's report; returns the masters whose connection goes now
        (READONLY from a master with a place)."""
        self.lagging = (self.lagging & ~report.caught_up) | report.lagged
        places = self.places
        if report.up:
            for i, backoff in enumerate(self.backoffs):
                if report.up >> i & 1:
                    backoff.succeeded()
        for i, (at, reason) in report.reasons.items():
            bit = 1 << i
            self.backoffs[i].failed(at)
            self.last_error[i] = f"not retried yet after: {reason}"
            self.down |= bit
            self.unreached = (
                (self.unreached | bit) if report.unreached & bit else (self.unreached & ~bit)
            )
            if places[i] is not None:  # its address may have moved: a failover, a DNS change
                _resolver.refresh(places[i])
            if self.router is not None:
                self.router.failed(i)
        drop = 0
        if report.readonly:
            for i, place in enumerate(places):
                if report.readonly >> i & 1 and place is not None:
                    drop |= 1 << i
                    _resolver.refresh(place)
        return drop
