"""Redlock: the masters, the options, the engine pool, and the rounds every lock goes through."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Optional

from . import _backend, _config, _scripts
from ._config import Duration, MasterLike, MasterSpec
from ._contract import RoundResult
from ._errors import Vote
from ._pool import EnginePool
from ._scripts import Outcome
from .lock import Lock


class Redlock:
    """A client of N independent Redis masters; makes locks that need a majority of them.

    masters:        URLs (redis://[user:password@]host:port/db, unix:///path?db=N), dicts of
                    options (host, port, db, username, password, path) or redis-py clients.
    retry_count:    attempts in a row that may fail for lack of answering masters before acquire
                    raises QuorumUnreachable (a lock merely held by others is waited for instead).
    retry_delay:    seconds between attempts, randomised (x0.5 to x1.5) so rivals do not collide.
    drift_factor:   share of the ttl kept back for clock drift between this host and the masters.
    master_timeout: seconds to wait for each master per round; None: 5% of the ttl, 5 to 50 ms.
    backend:        "auto" (HIREDLOCK_IMPL, else native when it loads), "native" or "python".
    """

    def __init__(
        self,
        masters: Iterable[MasterLike],
        *,
        retry_count: int = 3,
        retry_delay: Duration = 0.2,
        drift_factor: float = _scripts.DEFAULT_DRIFT_FACTOR,
        master_timeout: Optional[Duration] = None,
        backend: str = "auto",
    ) -> None:
        engine_class = _backend.engine_class(backend)
        self._masters: tuple[MasterSpec, ...] = _config.parse_masters(masters)
        self._master_names = tuple(str(spec) for spec in self._masters)
        self._quorum = _scripts.quorum(len(self._masters))
        self._retry_count = _config.non_negative_int(retry_count, "retry_count")
        if self._retry_count < 1:
            raise ValueError("retry_count must be at least 1 (it counts attempts), got 0")
        self._retry_delay = _config.non_negative_seconds(retry_delay, "retry_delay")
        self._drift_factor = _config.drift_factor(drift_factor)
        self._master_timeout_ms = (
            None
            if master_timeout is None
            else _config.positive_duration_ms(master_timeout, "master_timeout")
        )
        self.backend: str = engine_class.name
        self._pool = EnginePool(lambda: engine_class(self._masters, self._quorum))

    # -- public ------------------------------------------------------------------------------

    @property
    def masters(self) -> tuple[MasterSpec, ...]:
        return self._masters

    @property
    def quorum(self) -> int:
        return self._quorum

    @property
    def retry_count(self) -> int:
        return self._retry_count

    @property
    def retry_delay(self) -> float:
        return self._retry_delay

    @property
    def drift_factor(self) -> float:
        return self._drift_factor

    def lock(self, name: str | bytes, ttl: Duration) -> Lock:
        """A lock on `name` (the Redis key) held for `ttl` seconds at most. No I/O happens here."""
        return Lock(self, name, ttl)

    def master_timeout_ms(self, ttl_ms: float) -> float:
        """The per-master wait of one round for a lock of this ttl."""
        if self._master_timeout_ms is not None:
            return self._master_timeout_ms
        return _scripts.default_master_timeout_ms(ttl_ms)

    def close(self) -> None:
        """Closes every connection. Locks still held stay on the masters until their ttl."""
        self._pool.close()

    def __enter__(self) -> Redlock:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Redlock({list(self._master_names)!r}, backend={self.backend!r})"

    # -- rounds, for Lock --------------------------------------------------------------------

    def _set_nx(
        self, keys: Sequence[bytes], tokens: Sequence[bytes], ttl_ms: int, timeout_ms: float
    ) -> list[RoundResult]:
        engine = self._pool.checkout()
        try:
            return engine.set_nx(keys, tokens, ttl_ms, timeout_ms)
        finally:
            self._pool.checkin(engine)

    def _script(
        self,
        script: _scripts.Script,
        keys: Sequence[bytes],
        tokens: Sequence[bytes],
        extra_arg: Optional[bytes],
        timeout_ms: float,
        wait_all: bool,
    ) -> list[RoundResult]:
        engine = self._pool.checkout()
        try:
            return engine.run_script(
                script.sha, script.source, keys, tokens, extra_arg, timeout_ms, wait_all
            )
        finally:
            self._pool.checkin(engine)

    def _votes(self, result: RoundResult) -> tuple[Vote, ...]:
        codes, _elapsed, details = result
        details = details or {}
        return tuple(
            Vote(name, Outcome(code), details.get(index))
            for index, (name, code) in enumerate(zip(self._master_names, codes))
        )
