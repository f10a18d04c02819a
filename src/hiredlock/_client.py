"""What Redlock and hiredlock.aio.AsyncRedlock have in common: their options, read-only."""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional, Union

from ._config import Duration, MasterSpec
from ._session import Session

NameOrFactory = Union[str, bytes, Callable[..., Union[str, bytes]]]


class ClientBase:
    """The options of a client of N masters (its locks share them through its Session)."""

    _session: Session
    backend: str

    @property
    def session(self) -> Session:
        """The state this client's locks share (for hiredlock's own lock classes)."""
        return self._session

    @property
    def masters(self) -> tuple[MasterSpec, ...]:
        return self._session.masters

    @property
    def closed(self) -> bool:
        """True once closed: no lock can be acquired any more."""
        return self._session.closed

    @property
    def quorum(self) -> int:
        return self._session.quorum

    @property
    def retry_count(self) -> int:
        return self._session.retry_count

    @property
    def retry_delay(self) -> float:
        return self._session.retry_delay

    @property
    def drift_factor(self) -> float:
        return self._session.drift_factor

    def master_timeout_ms(self, ttl_ms: float) -> float:
        """The per-master wait of one round for a lock of this ttl."""
        return self._session.master_timeout_ms(ttl_ms)

    def lock(self, name: str | bytes, ttl: Duration, **options: Any) -> Any:
        raise NotImplementedError

    def _lock_factory(
        self,
        name: NameOrFactory,
        ttl: Duration,
        blocking_timeout: Optional[Duration],
        auto_renew: bool,
        options: dict[str, Any],
    ) -> Callable[[Any, Any], Any]:
        """synchronized's lock maker: (args, kwargs) -> a new lock; bad options fail now, at
        decoration, not at the first call."""
        make = functools.partial(
            self.lock, ttl=ttl, blocking_timeout=blocking_timeout, auto_renew=auto_renew, **options
        )
        if callable(name):
            make("checking the options")

            def for_call(args: Any, kwargs: Any) -> Any:
                return make(name(*args, **kwargs))

        else:
            make(name)

            def for_call(args: Any, kwargs: Any) -> Any:
                return make(name)

        return for_call

    def __repr__(self) -> str:
        masters = list(self._session.master_names)
        return f"{type(self).__name__}({masters!r}, backend={self.backend!r})"
