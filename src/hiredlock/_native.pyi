"""Type stub of the Cython extension hiredlock._native (source: _native/engine.pyx)."""

from collections.abc import Sequence
from typing import ClassVar, Optional

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
    def close(self) -> None: ...
