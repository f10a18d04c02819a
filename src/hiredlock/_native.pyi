"""Type stub of the Cython extension hiredlock._native (source: _native/engine.pyx)."""

from collections.abc import Callable, Generator, Sequence
from typing import Any, ClassVar, Optional

from ._config import MasterSpec
from ._contract import RoundResult

HIREDIS_VERSION: str

class NativeEngine:
    name: ClassVar[str]
    def __init__(self, masters: Sequence[MasterSpec], quorum: Optional[int] = None) -> None: ...
    def set_nx(
        self,
        keys: Sequence[bytes],
        tokens: Sequence[bytes],
        ttl_ms: int,
        timeout_ms: float,
    ) -> list[RoundResult]: ...
    def run_script(
        self,
        sha: bytes,
        source: bytes,
        numkeys: int,
        argvs: Sequence[tuple[bytes, ...]],
        timeout_ms: float,
        wait_all: bool,
        want_values: bool = False,
        honour_backoff: bool = False,
    ) -> list[RoundResult]: ...
    def begin_set_nx(
        self,
        keys: Sequence[bytes],
        tokens: Sequence[bytes],
        ttl_ms: int,
        timeout_ms: float,
    ) -> NativeRound: ...
    def begin_script(
        self,
        sha: bytes,
        source: bytes,
        numkeys: int,
        argvs: Sequence[tuple[bytes, ...]],
        timeout_ms: float,
        wait_all: bool,
        want_values: bool = False,
        honour_backoff: bool = False,
    ) -> NativeRound: ...
    def finish(self, rnd: NativeRound) -> list[RoundResult]: ...
    def owes_replies(self) -> bool: ...
    def close(self) -> None: ...

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

def set_step_kinds(set_nx: int, pause: int, pause_function: Callable[[tuple], None]) -> None: ...
def run_steps(
    steps: Generator[tuple[int, Any], Any, Any], pool: Any, pin: Optional[list] = None
) -> Any: ...
