"""Lock: one named lock on a Redlock's masters: acquire, release, extend, and its validity."""

from __future__ import annotations

import logging
import os
import random
import time
from typing import TYPE_CHECKING, Any, Optional

from . import _config, _scripts
from ._config import Duration
from ._errors import HiredlockError, LockLost, LockNotAcquired, NotHeld, QuorumUnreachable

if TYPE_CHECKING:
    from .redlock import Redlock

_OK = int(_scripts.Outcome.OK)
_TAKEN = int(_scripts.Outcome.TAKEN)
_log = logging.getLogger("hiredlock")


class Lock:
    """A Redlock lock on one name. Made by Redlock.lock(); not shared between threads."""

    __slots__ = (
        "_drift_ms",
        "_key",
        "_last_codes",
        "_last_votes",
        "_lost",
        "_name",
        "_redlock",
        "_timeout_ms",
        "_token",
        "_ttl_ms",
        "_valid_until_ns",
    )

    def __init__(self, redlock: Redlock, name: str | bytes, ttl: Duration) -> None:
        self._redlock = redlock
        self._key = _config.lock_name(name)
        self._name = name
        self._ttl_ms, self._timeout_ms, self._drift_ms = self._timing(ttl, "ttl")
        self._token: Optional[bytes] = None
        self._valid_until_ns = 0
        self._lost = False
        self._last_votes: tuple = ()
        self._last_codes: Optional[bytes] = None  # per-master outcomes of the last failed attempt

    def _timing(self, ttl: Any, argument: str) -> tuple[int, float, float]:
        """ttl in ms, per-master timeout and drift; refuses a ttl that could never be valid."""
        ttl_ms = _config.ttl_ms(ttl, argument)
        timeout_ms = self._redlock.master_timeout_ms(ttl_ms)
        drift = _scripts.drift_ms(ttl_ms, self._redlock.drift_factor)
        if _scripts.validity_ms(ttl_ms, timeout_ms, self._redlock.drift_factor) <= 0:
            raise ValueError(
                f"{argument} of {ttl_ms} ms is too short: the per-master timeout "
                f"({timeout_ms:g} ms) and the clock drift allowance ({drift:g} ms) would leave "
                "no validity"
            )
        return ttl_ms, timeout_ms, drift

    # -- state ---------------------------------------------------------------------------------

    @property
    def name(self) -> str | bytes:
        return self._name

    @property
    def key(self) -> bytes:
        return self._key

    @property
    def ttl(self) -> float:
        """The ttl in seconds (as sent: whole milliseconds)."""
        return self._ttl_ms / 1000.0

    @property
    def token(self) -> Optional[str]:
        """This holder's random token (40 hex characters) while acquired, else None."""
        return None if self._token is None else self._token.decode()

    @property
    def validity(self) -> float:
        """Seconds the lock is still guaranteed to be ours (0.0 when not held)."""
        if self._token is None or self._lost:
            return 0.0
        return max(0.0, (self._valid_until_ns - time.monotonic_ns()) / 1e9)

    @property
    def held(self) -> bool:
        """Acquired, not released, not lost, and still valid (a local view: no I/O)."""
        return self.validity > 0.0

    @property
    def last_votes(self) -> tuple:
        """The masters' votes in this lock's last round."""
        return self._last_votes

    # -- acquire -------------------------------------------------------------------------------

    def acquire(self, blocking: bool = True, timeout: Optional[Duration] = None) -> bool:
        """Acquires the lock; True once held by a valid quorum.

        blocking=False tries once. blocking=True retries, after a random delay around the Redlock's
        retry_delay, while the lock is held by others: forever when timeout is None, else until
        `timeout` seconds have passed (an overall deadline). Returns False when the lock stayed
        taken. Raises QuorumUnreachable when too few masters answered, after retry_count attempts
        in a row (at once when blocking=False).
        """
        if not isinstance(blocking, bool):
            raise TypeError(f"blocking must be a bool, not {type(blocking).__name__}")
        deadline_ns: Optional[int] = None
        if timeout is not None:
            if not blocking:
                raise ValueError("timeout cannot be given with blocking=False")
            wait_ms = _config.duration_ms(timeout, "timeout")
            if wait_ms < 0:
                raise ValueError(f"timeout must be >= 0 or None, got {timeout!r}")
            deadline_ns = time.monotonic_ns() + int(wait_ms * 1_000_000)
        if self._token is not None and not self._lost:
            raise HiredlockError(f"lock {self._name!r} is already acquired by this Lock object")
        redlock = self._redlock
        unreachable_in_a_row = 0
        while True:
            if self._attempt():
                return True
            if self._last_codes is not None and _scripts.quorum_unreachable(
                self._last_codes, redlock.quorum
            ):
                unreachable_in_a_row += 1
            else:
                unreachable_in_a_row = 0
            if unreachable_in_a_row and (
                not blocking or unreachable_in_a_row >= redlock.retry_count
            ):
                raise QuorumUnreachable(
                    f"lock {self._name!r}: too many masters failed to answer "
                    f"({redlock.quorum} of {len(redlock.masters)} needed)",
                    self._last_votes,
                )
            if not blocking:
                return False
            delay = redlock.retry_delay * random.uniform(0.5, 1.5)
            if deadline_ns is not None:
                remaining = (deadline_ns - time.monotonic_ns()) / 1e9
                if remaining <= 0:
                    if unreachable_in_a_row:
                        raise QuorumUnreachable(
                            f"lock {self._name!r}: too few masters answered before the deadline",
                            self._last_votes,
                        )
                    return False
                delay = min(delay, remaining)
            time.sleep(delay)

    def _attempt(self) -> bool:
        """One round: SET NX PX on every master; on failure, unlock every master."""
        token = os.urandom(_scripts.TOKEN_BYTES).hex().encode()
        redlock = self._redlock
        start = time.monotonic_ns()
        result = redlock._set_nx((self._key,), (token,), self._ttl_ms, self._timeout_ms)[0]
        codes, elapsed_ns, _details = result
        validity = self._ttl_ms - elapsed_ns / 1e6 - self._drift_ms
        if codes.count(_OK) >= redlock.quorum and validity > 0:
            self._token = token
            self._lost = False
            self._valid_until_ns = start + int((self._ttl_ms - self._drift_ms) * 1_000_000)
            self._last_votes = ()
            self._last_codes = None
            return True
        # Masters that timed out may have applied the SET and lost only the reply: unlock all.
        redlock._script(
            _scripts.RELEASE, (self._key,), (token,), None, self._timeout_ms, wait_all=True
        )
        self._last_votes = redlock._votes(result)
        self._last_codes = codes
        return False

    # -- release and extend ----------------------------------------------------------------------

    def release(self) -> None:
        """Unlocks every master. Raises LockLost if fewer than a quorum still held our token."""
        token = self._token
        if token is None:
            raise NotHeld(f"lock {self._name!r} is not held by this Lock object")
        self._token = None
        lost = self._lost
        self._lost = False
        self._valid_until_ns = 0
        redlock = self._redlock
        result = redlock._script(
            _scripts.RELEASE, (self._key,), (token,), None, self._timeout_ms, wait_all=True
        )[0]
        if lost or result[0].count(_OK) < redlock.quorum:
            self._last_votes = redlock._votes(result)
            raise LockLost(
                f"lock {self._name!r} was no longer held by a quorum when released",
                self._last_votes,
            )

    def extend(self, ttl: Optional[Duration] = None) -> None:
        """Re-arms the lock for `ttl` seconds (default: its own ttl) from now, on every master.

        Counts only if a quorum extended and the new validity, measured from this call's start, is
        positive; otherwise the lock is marked lost and LockLost is raised. A key that has expired
        is never created again.
        """
        token = self._token
        if token is None or self._lost:
            raise NotHeld(f"lock {self._name!r} is not held by this Lock object")
        if ttl is None:
            ttl_ms, timeout_ms, drift = self._ttl_ms, self._timeout_ms, self._drift_ms
        else:
            ttl_ms, timeout_ms, drift = self._timing(ttl, "ttl")
        redlock = self._redlock
        start = time.monotonic_ns()
        # wait_all: every master that keeps up gets the new ttl (and the EVAL after a NOSCRIPT);
        # the validity still counts from when the quorum was reached.
        result = redlock._script(
            _scripts.EXTEND,
            (self._key,),
            (token,),
            str(ttl_ms).encode(),
            timeout_ms,
            wait_all=True,
        )[0]
        codes, elapsed_ns, _details = result
        if codes.count(_OK) >= redlock.quorum and ttl_ms - elapsed_ns / 1e6 - drift > 0:
            self._valid_until_ns = start + int((ttl_ms - drift) * 1_000_000)
            return
        self._lost = True
        self._last_votes = redlock._votes(result)
        raise LockLost(f"lock {self._name!r} could not be extended on a quorum", self._last_votes)

    # -- context manager -------------------------------------------------------------------------

    def __enter__(self) -> Lock:
        if not self.acquire():
            raise LockNotAcquired(f"lock {self._name!r} was not acquired", self._last_votes)
        return self

    def __exit__(self, exc_type: Any, exc: Any, traceback: Any) -> None:
        if exc_type is None:
            self.release()
            return
        try:  # the body's exception wins; a failed release is only logged beside it
            self.release()
        except HiredlockError as release_error:
            _log.warning("releasing %r after an exception failed: %s", self._name, release_error)

    def __repr__(self) -> str:
        state = "held" if self.held else ("lost" if self._lost else "unlocked")
        return f"<hiredlock.Lock {self._name!r} ttl={self.ttl:g}s {state}>"
