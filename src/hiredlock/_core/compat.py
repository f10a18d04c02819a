"""Typing names newer than Python 3.9: from typing or typing_extensions.

typing has them from 3.11 (Self, Unpack, generic TypedDicts); before, typing_extensions gives them
(a dependency on those versions only)."""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    from typing import Self, TypedDict, Unpack
else:
    from typing_extensions import Self, TypedDict, Unpack

__all__ = ["Self", "TypedDict", "Unpack"]
