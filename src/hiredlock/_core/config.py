"""MasterSpec, where the engine modules (_engines/contract.py, _engines/python_engine.py) import it
from; it lives in _core/masters.py, and everything else imports it from there."""

from __future__ import annotations

from .masters import MasterSpec

__all__ = ["MasterSpec"]
