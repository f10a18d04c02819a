"""What Redlock and hiredlock.aio.AsyncRedlock have in common: the Session they make, and their
options, read-only."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Any, Callable, ClassVar, Optional, TypeVar, Union

from . import scripts as _scripts
from . import validation as _validation
from .events import Observer, observers_for
from .flavour import Flavour
from .masters import MasterLike, MasterSpec, parse_masters
from .session import Session
from .validation import Duration

NameOrFactory = Union[str, bytes, Callable[..., Union[str, bytes]]]

_L = TypeVar("_L")


class ClientBase:
    """A client of N masters: its options (its locks share them through its Session); the API
    class gives its flavour (_flavour: its engines, how its rounds run, what wakes its waiters,
    what renews its locks)."""

    _flavour: ClassVar[Flavour]

    def __init__(
        self,
        masters: Iterable[MasterLike],
        *,
        retry_count: int = 3,
        retry_delay: Duration = 0.2,
        drift_factor: float = _scripts.DEFAULT_DRIFT_FACTOR,
        master_timeout: Optional[Duration] = None,
        backend: str = "auto",
        wake: bool = True,
        on_event: Optional[Observer] = None,
        namespace: Union[str, bytes, None] = None,
    ) -> None:
        observers = observers_for(on_event)
        specs = parse_masters(masters)
        session = Session(
            specs,
            retry_count=retry_count,
            retry_delay=retry_delay,
            drift_factor=drift_factor,
            master_timeout=master_timeout,
            engine_class=self._flavour.engine_class(backend, specs),
            observers=observers,
            namespace=namespace,
        )
        # The state this client's locks share (for hiredlock's own lock classes: an attribute,
        # read once by every lock object made)
        self.session: Session = session
        session.label = hex(id(self))
        session.wake = _validation.flag(wake, "wake")
        self.backend: str = session.backend
        flavour = self._flavour
        session.rounds = flavour.rounds(session)
        session.notices = flavour.notices(session)
        session.heard = session.notices.heard
        session.renewals = flavour.renewals(session)

    @property
    def masters(self) -> tuple[MasterSpec, ...]:
        return self.session.masters

    @property
    def closed(self) -> bool:
        """True once closed: no lock can be acquired any more."""
        return self.session.closed

    @property
    def namespace(self) -> bytes:
        """The prefix of every key and channel this client writes or reads (b"": none)."""
        return self.session.namespace

    @property
    def quorum(self) -> int:
        return self.session.quorum

    @property
    def retry_count(self) -> int:
        return self.session.retry_count

    @property
    def retry_delay(self) -> float:
        return self.session.retry_delay

    @property
    def wake(self) -> bool:
        """Whether waiters are woken by release notices (the default of each lock's `wake`)."""
        return self.session.wake

    @property
    def drift_factor(self) -> float:
        return self.session.drift_factor

    def master_timeout_ms(self, ttl_ms: float) -> float:
        """The per-master wait of one round for a lock of this ttl."""
        return self.session.master_timeout_ms(ttl_ms)

    @staticmethod
    def _lock_factory(
        lock: Callable[..., _L], name: NameOrFactory, ttl: Duration, options: Mapping[str, Any]
    ) -> Callable[[tuple[Any, ...], dict[str, Any]], _L]:
        """synchronized's lock maker: (args, kwargs) -> a new lock made by `lock` (the client's
        lock()); bad options fail now, at decoration, not at the first call."""
        make = functools.partial(lock, ttl=ttl, **options)
        make("checking the options" if callable(name) else name)

        def for_call(args: tuple[Any, ...], kwargs: dict[str, Any]) -> _L:
            return make(name(*args, **kwargs) if callable(name) else name)

        return for_call

    def __repr__(self) -> str:
        masters = list(self.session.master_names)
        return f"{type(self).__name__}({masters!r}, backend={self.backend!r})"
