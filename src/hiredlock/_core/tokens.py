"""Lock tokens: 20 random bytes from the OS each, as 40 hex characters.

The OS CSPRNG is read for 64 tokens at a time (one system call instead of one per acquire). Tokens
are handed out with deque.popleft, which is atomic: no two threads ever get the same one. A forked
child forgets the tokens read before the fork, so that it never hands out one its parent may hand
out too.
"""

from __future__ import annotations

import os
from binascii import hexlify
from collections import deque

from .scripts import TOKEN_BYTES

try:
    import cython  # type: ignore[import-untyped]
except ImportError:  # uncompiled, without Cython installed: only `compiled` is read
    from types import SimpleNamespace

    cython = SimpleNamespace(compiled=False)

_BATCH = 64

_ready: deque[bytes] = deque()
_take = _ready.popleft


def new_token() -> bytes:
    """A fresh token (40 hex characters, as bytes)."""
    while True:
        try:
            return _take()
        except IndexError:
            _refill()


def _refill() -> None:
    random = os.urandom(TOKEN_BYTES * _BATCH)
    if cython.compiled:
        # Each token written in hex in C (tokens.pxd's hex_token): about 200 instructions a
        # token, where hexlify and split() below cost some 800.
        made = []
        for at in range(0, len(random), TOKEN_BYTES):
            made.append(hex_token(random, at, TOKEN_BYTES))  # type: ignore[name-defined]  # noqa: F821
        _ready.extend(made)
    else:
        # One hex string with a space after each token's 40 characters, split: the batch's tokens
        # in three calls into C (slicing it token by token in Python costs some 900 instructions
        # a token).
        _ready.extend(hexlify(random, b" ", TOKEN_BYTES).split())


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_ready.clear)
