"""The judgement of the algorithm, written once and without I/O: what a round's votes mean, and what
follows a failed round (retry after a delay, give up, raise, mark the lock lost).

Every API layer calls these (one or two calls per round), whatever engine moved the bytes and
however it waits: a blocking caller sleeps for the delay it is told, an asyncio one awaits it.
The scripts, outcome codes and constants the engines share are in _core/scripts.py.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Optional, Protocol

from . import clock as _clock
from .errors import MasterConfigError, QuorumUnreachable, Vote
from .scripts import (
    DRIFT_CONSTANT_MS,
    FAILURES,
    MASTER_TIMEOUT_FRACTION,
    MASTER_TIMEOUT_MAX_MS,
    MASTER_TIMEOUT_MIN_MS,
    Outcome,
)

_OK = int(Outcome.OK)
_TAKEN = int(Outcome.TAKEN)

# -- timing -------------------------------------------------------------------------------------


def drift_ms(ttl_ms: float, drift_factor: float) -> float:
    return ttl_ms * drift_factor + DRIFT_CONSTANT_MS


def validity_ms(ttl_ms: float, elapsed_ms: float, drift_factor: float) -> float:
    """Time the lock is still guaranteed for, measured from the end of the round."""
    return ttl_ms - elapsed_ms - drift_ms(ttl_ms, drift_factor)


def valid_until_ns(start_ns: int, ttl_ms: int, drift: float) -> int:
    """When a lock that a round begun at start_ns (monotonic ns) took or extended for ttl_ms stops
    being valid: the ttl less the drift, counted from the round's start."""
    span = int((ttl_ms - drift) * 1_000_000)  # (compiled, a C long long: judgement.pxd)
    return start_ns + span


def default_master_timeout_ms(ttl_ms: float) -> float:
    return min(MASTER_TIMEOUT_MAX_MS, max(MASTER_TIMEOUT_MIN_MS, ttl_ms * MASTER_TIMEOUT_FRACTION))


# -- one round's votes ----------------------------------------------------------------------


def oks(codes: bytes) -> int:
    """How many masters said OK. (A loop, not bytes.count: compiled, it is a loop in C, where
    a call of bytes.count parses its arguments: some 450 instructions on every round's path.)"""
    count = 0
    for code in codes:
        if code == _OK:
            count += 1
    return count


def says_more(codes: bytes, quiet: bytes) -> bool:
    """Whether a round's codes hold one that is not in `quiet` (see Session.quiet_acquire): a
    round to observe or report. (Compiled, a loop in C: `codes.strip(quiet)` is a method call that
    parses its arguments, some 380 instructions on every acquire's path.)"""
    for code in codes:  # noqa: SIM110 (a generator in a cpdef function does not compile)
        if code not in quiet:
            return True
    return False


def won(codes: bytes, elapsed_ns: int, ttl_ms: int, drift: float, n_quorum: int) -> bool:
    """A quorum said OK, and time is left: ttl - elapsed - drift > 0 (acquire and extend alike,
    elapsed counted from the start of the round the validity is measured from)."""
    return oks(codes) >= n_quorum and ttl_ms - elapsed_ns / 1e6 - drift > 0


def first_free_taken(
    codes: bytes,
    positions: Sequence[int],
    elapsed_ns: int,
    ttl_ms: int,
    drift: float,
    n_quorum: int,
) -> tuple[int, bytes]:
    """A semaphore round's judgement (each master took the first free of the keys it was sent
    and said which, 1-based, or 0): (the position a quorum took in time, or 0; the votes as a
    lock's round for that position: OK where a master took it, TAKEN where it took another)."""
    taken = [position for code, position in zip(codes, positions) if code == _OK]
    if not taken:
        return 0, codes
    best = max(set(taken), key=taken.count)
    as_lock = bytes(
        (_OK if position == best else _TAKEN) if code == _OK else code
        for code, position in zip(codes, positions)
    )
    if won(as_lock, elapsed_ns, ttl_ms, drift, n_quorum):
        return best, as_lock
    return 0, as_lock


def first_free_strays(codes: bytes, positions: Sequence[int], n_keys: int, kept: int) -> list[int]:
    """The positions a semaphore round may have set and must unlock on every master: those the
    masters took other than `kept`, and every one when some master's answer is unknown (it may
    have taken any)."""
    if any(code != _OK and code != _TAKEN for code in codes):
        return [position for position in range(1, n_keys + 1) if position != kept]
    return sorted(
        {position for code, position in zip(codes, positions) if code == _OK and position != kept}
    )


def free_in_ms(codes: bytes, values: Sequence[int], n_quorum: int) -> Optional[float]:
    """From the replies of RELEASE_AFTER_FAILURE (see _scripts): in how many ms a quorum of
    masters will have the name free (the quorum-th earliest expiry; 0 only when a quorum had it
    free already), or None when that is not known (too few masters answered, or the holder's
    keys have no expiry)."""
    free_at = []
    for code, value in zip(codes, values):
        if code == _OK or (code == _TAKEN and value == 0):
            free_at.append(0)
        elif code == _TAKEN and value <= -2:
            # (a PTTL of p ms is read in whole ms of the master's clock, and the key lives until
            # that clock has passed p: up to p + 1 ms; a waiter that came sooner would be refused)
            free_at.append(-1 - value)
    if len(free_at) < n_quorum:
        return None
    free_at.sort()
    return float(free_at[n_quorum - 1])


# A waiter that knows when the holder's keys expire tries again this long after, at random (so
# that waiters who learnt the same expiry do not all arrive at once).
EXPIRY_SPREAD_MS = 2.0


def wake_delay(delay: float, free_in_ms: Optional[float]) -> float:
    """The longest a waiter woken by release notices waits (it may be woken sooner): the retry
    delay, or less when the name frees itself (its holder's keys expire) before it."""
    if free_in_ms is None:
        return delay
    return min(delay, (free_in_ms + random.uniform(0.0, EXPIRY_SPREAD_MS)) / 1000.0)


def split_with_rivals(codes: bytes) -> bool:
    """The attempt got some masters and a rival the rest (masters that failed are no rival)."""
    return _OK in codes and _TAKEN in codes


def settle_after_notice(elapsed_ns: int, splits: int, retry_delay: float) -> float:
    """How long a waiter woken by a notice waits before it tries again, in seconds, after
    `splits` attempts in a row that split the masters with rivals (0: none, no pause).

    Waiters woken by one notice try at the same moment; when they split the masters (each
    split's unlock wakes them all anew), none gets a quorum, and under a stopped minority every
    interleaving splits. A random pause sets them apart, as the retry delay's randomness does:
    up to two such rounds (1 ms at least), doubling with each split in a row, at most four
    retry delays (a split round under a stopped minority lasts a master timeout: the pauses
    must outgrow it for the waiters to come apart)."""
    if not splits:
        return 0.0
    bound = max(0.001, 2 * elapsed_ns / 1e9) * 2 ** min(splits - 1, 16)
    return random.uniform(0.0, min(max(4 * retry_delay, 0.001), bound))


def failures(codes: bytes) -> int:
    """How many masters failed (timed out, broke the connection, answered an error)."""
    return sum(codes.count(outcome) for outcome in FAILURES)


def quorum_unreachable(codes: bytes, n_quorum: int) -> bool:
    """True when so many masters failed that no quorum could have answered, free lock or not."""
    return failures(codes) > len(codes) - n_quorum


# Error replies that say the client is misconfigured (a wrong password, none where one is needed,
# an ACL that forbids our commands or keys), not that the master is down.
_CONFIG_ERROR = re.compile(r"\b(WRONGPASS|NOAUTH|NOPERM)\b")


def is_config_error(detail: Optional[str]) -> bool:
    return detail is not None and _CONFIG_ERROR.search(detail) is not None


# -- after a failed attempt to acquire ------------------------------------------------------------


class RetryPolicy(Protocol):
    """The options Retrying follows (a Redlock's)."""

    @property
    def retry_count(self) -> int: ...

    @property
    def retry_delay(self) -> float: ...


class Retrying:
    """What follows each failed attempt of one acquire() call: the same for every lock kind and
    for both APIs, which only do the waiting.

    after_failure() raises MasterConfigError at once when too many masters refused our
    credentials or permissions, QuorumUnreachable after retry_count attempts in a row that too
    few masters answered (at once when not blocking, or at the deadline); otherwise it returns
    the delay before the next attempt (random, 0.5 to 1.5 x retry_delay, never past the
    deadline), or None when the caller gives up (not blocking, or the deadline passed).
    """

    __slots__ = ("_blocking", "_deadline_ns", "_name", "_policy", "_quorum", "_unreachable")

    def __init__(
        self,
        name: object,
        n_quorum: int,
        policy: RetryPolicy,
        blocking: bool,
        deadline_ns: Optional[int],
    ) -> None:
        self._name = name
        self._quorum = n_quorum
        self._policy = policy
        self._blocking = blocking
        self._deadline_ns = deadline_ns
        self._unreachable = 0  # failed attempts in a row that too few masters answered

    def after_failure(self, codes: bytes, votes: Sequence[Vote]) -> Optional[float]:
        policy = self._policy
        n_masters = len(codes)
        if quorum_unreachable(codes, self._quorum):
            self._unreachable += 1
            refused = sum(is_config_error(vote.detail) for vote in votes)
            if refused > n_masters - self._quorum:
                raise MasterConfigError(
                    f"lock {self._name!r}: {refused} of {n_masters} masters refused the "
                    "credentials or permissions (check the password, user and ACLs)",
                    tuple(votes),
                )
        else:
            self._unreachable = 0
        if self._unreachable and (not self._blocking or self._unreachable >= policy.retry_count):
            raise QuorumUnreachable(
                f"lock {self._name!r}: too many masters failed to answer "
                f"({self._quorum} of {n_masters} needed)",
                tuple(votes),
            )
        if not self._blocking:
            return None
        delay = retry_delay_until(policy.retry_delay, self._deadline_ns)
        if delay is None and self._unreachable:
            raise QuorumUnreachable(
                f"lock {self._name!r}: too few masters answered before the deadline",
                tuple(votes),
            )
        return delay


def retry_delay_until(retry_delay: float, deadline_ns: Optional[int]) -> Optional[float]:
    """How long a waiter waits before its next attempt when nothing wakes it sooner: 0.5 to 1.5 x
    retry_delay at random, never past the deadline (monotonic ns; None: none); None when the
    deadline has passed."""
    delay = retry_delay * random.uniform(0.5, 1.5)
    if deadline_ns is None:
        return delay
    remaining = (deadline_ns - _clock.monotonic_ns()) / 1e9
    if remaining <= 0:
        return None
    return min(delay, remaining)


# -- waiting marks (a read-write lock's, a fair lock's queue) -------------------------------------

# A waiter tries again within 1.5 x retry_delay when no notice wakes it, and each try renews its
# marks on the masters; they last three retry delays and two round timeouts, 100 ms at least, so
# that a waiter that gave up or died holds nobody back for longer.
MIN_WINDOW_MS = 100


def waiting_window_ms(retry_delay_s: float, timeout_ms: float) -> int:
    return max(MIN_WINDOW_MS, int(3000 * retry_delay_s + 2 * timeout_ms))


# -- after a failed renewal -------------------------------------------------------------------

# A failed renewal is tried again after an eighth of the validity left, within these bounds.
RENEW_RETRY_MIN_MS = 10.0
RENEW_RETRY_MAX_MS = 250.0


def renewal_retry_ns(
    codes: bytes, n_quorum: int, now_ns: int, valid_until_ns: int, timeout_ms: float
) -> Optional[int]:
    """When to try a failed renewal again, or None when the lock is lost.

    Lost: a majority answered that the key is not ours (TAKEN: an extend never revives a key), or
    the validity left could not hold another round (a wait, then up to two per-master timeouts:
    the connect allowance of a master that reconnects aside).
    """
    if codes.count(_TAKEN) > len(codes) - n_quorum:
        return None
    remaining_ns = valid_until_ns - now_ns
    delay_ns = int(min(RENEW_RETRY_MAX_MS, max(RENEW_RETRY_MIN_MS, remaining_ns / 8e6)) * 1_000_000)
    if delay_ns + 2 * timeout_ms * 1_000_000 >= remaining_ns:
        return None
    return now_ns + delay_ns
