"""What Semaphore (blocking) and hiredlock.aio.AsyncSemaphore share: the options, the permits
(locks on keys of their own, see _lockbase.acquire_permit_steps for how one is taken) and which
permits each owner (thread or task) took with `with`."""

from __future__ import annotations

from typing import Any, Callable, Optional

from .config import Duration, lock_name, non_negative_int
from .lockbase import acquire_permit_steps, share_pin
from .requests import Steps

# An attempt that finds every permit taken asks each master for all of them, a few per round.
MAX_PERMITS = 1000


class SemaphoreBase:
    """A counting semaphore over the masters: at most `permits` holders of `name` at a time,
    across every client. Made by a client's semaphore(); no I/O happens here. The options are
    lock()'s, for each permit (blocking_timeout bounds `with`, as a lock's)."""

    _permit_class: Callable[..., Any]  # the API's permit class (Permit, AsyncPermit)

    def __init__(
        self, client: Any, name: str | bytes, permits: int, ttl: Duration, **options: Any
    ) -> None:
        lock_name(name)  # a bad name is refused as lock() refuses it
        if non_negative_int(permits, "permits") < 1 or permits > MAX_PERMITS:
            raise ValueError(f"permits must be in 1..{MAX_PERMITS}, got {permits!r}")
        if options.get("fencing", False) is not False:
            # A fence orders the holders of one name; permits are held side by side.
            raise ValueError("fencing is not supported for semaphore permits")
        self._name = name
        self._session = client.session
        self._n_permits = permits
        self._pin: list = [None]  # the rounds of this semaphore and of its permits (see LockBase)

        def make(index: int) -> Any:
            permit = self._permit_class(client, name, index, ttl, **options)
            share_pin([permit], self._pin)
            return permit

        # Permit objects are made per acquisition (one object is never handed to two holders:
        # a late release by an earlier holder must not let go of the next one's permit); this
        # one checks the options now and gives the permits' timing.
        self._template = make(0)
        self._make_permit = make
        self._live: dict[int, Any] = {}  # index -> the permit handed out last for it
        self._entered: dict[Any, list[Any]] = {}  # owner -> the permits its `with` blocks took
        self._blocking_timeout = self._template.blocking_timeout
        self._last_votes: tuple = ()

    @property
    def name(self) -> str | bytes:
        return self._name

    @property
    def permits(self) -> int:
        """How many holders the semaphore allows at a time."""
        return self._n_permits

    @property
    def held(self) -> list[Any]:
        """The permits held through this object now (a local view: no I/O)."""
        return [permit for permit in list(self._live.values()) if permit.held]

    def _acquire_steps(
        self, blocking: Any, timeout: Optional[Duration], taken: Optional[list] = None
    ) -> Steps:
        return acquire_permit_steps(
            self._session,
            self._name,
            self._template,
            self._live,
            self._make_permit,
            self._n_permits,
            blocking,
            timeout,
            self._blocking_timeout,
            taken,
        )

    @property
    def last_votes(self) -> tuple:
        """The masters' votes in the last attempt that got no permit (its last round, as a lock's
        votes: OK where a master took the permit most of them took, TAKEN where it took none or
        another)."""
        return self._last_votes

    def _entering(self, owner: Any, permit: Any) -> None:
        self._entered.setdefault(owner, []).append(permit)

    def _leaving(self, owner: Any) -> Any:
        stack = self._entered[owner]
        permit = stack.pop()
        if not stack:
            del self._entered[owner]
        return permit

    def _refused(self, permit_votes: tuple) -> None:
        self._last_votes = permit_votes

    def __repr__(self) -> str:
        held = len(self.held)
        return (
            f"<hiredlock.{type(self).__name__} {self._name!r} permits={self._n_permits} "
            f"held here={held}>"
        )
