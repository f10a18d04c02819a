"""Type stub of the Cython extension hiredlock._native (source: _native/engine.pyx)."""

from collections.abc import Callable, Generator, Sequence
from typing import Any, ClassVar, Optional, final

from ._core.masters import MasterSpec
from ._core.requests import Pause, Request, RoundRequest
from ._engines.contract import RoundResult

HIREDIS_VERSION: str

@final
class NativeEngine:
    name: ClassVar[str]
    # (made by __cinit__: its arguments are __new__'s)
    # router: a routing table (hiredlock._engines.routing's Table): the engine's connections are
    # its links, its votes one column per place; masters is then not read
    def __new__(
        cls,
        masters: Sequence[MasterSpec],
        quorum: Optional[int] = None,
        router: Optional[Any] = None,
    ) -> NativeEngine: ...
    @property
    def router(self) -> Any: ...
    def run(self, request: RoundRequest) -> list[RoundResult]: ...
    def begin(self, request: RoundRequest) -> NativeRound: ...
    def finish(self, rnd: NativeRound) -> list[RoundResult]: ...
    def owes_replies(self) -> bool: ...
    def owed_fds(self) -> list[int]: ...
    def closes(self) -> int: ...
    def close(self) -> None: ...

@final
class NativeRound:
    before_close: Optional[Callable[[int], None]]
    @property
    def next_deadline_ns(self) -> int: ...
    def fds_wanted(self) -> dict[int, int]: ...
    def finished(self) -> bool: ...
    def on_ready(self, fd: int, readable: object, writable: object) -> None: ...
    def on_deadline(self, now_ns: int) -> None: ...
    def end(self) -> None: ...
    def break_off(self) -> None: ...

REQUEST_FIELDS: dict[str, dict[str, int]]

def set_request_types(
    set_nx: type,
    run_script: type,
    cleanup: type,
    pause: type,
    pause_function: Callable[[Pause], None],
) -> None: ...
def run_one(
    checkout: Callable[..., Any],
    checkin: Callable[[Any], None],
    request: Request,
    pin: Optional[list[Any]] = None,
) -> Any: ...
def run_steps(
    checkout: Callable[..., Any],
    checkin: Callable[[Any], None],
    steps: Generator[Request, Any, Any],
    pin: Optional[list[Any]] = None,
) -> Any: ...
