"""The modules the sync API's classes lived in before they became private (hiredlock.lock,
hiredlock.redlock, ...): each is kept so that old imports work, and warns once imported."""

from __future__ import annotations

import warnings
from collections.abc import Sequence


def warn_moved(module: str, names: Sequence[str]) -> None:
    """Warns (DeprecationWarning) that `module` is kept for old imports only."""
    warnings.warn(
        f"{module} is deprecated and will be removed: import {', '.join(names)} from hiredlock",
        DeprecationWarning,
        stacklevel=3,
    )
