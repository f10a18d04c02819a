"""Lock tokens: 20 random bytes from the OS each, as 40 hex characters.

The OS CSPRNG is read for 64 tokens at a time (one system call instead of one per acquire), and
no two threads ever get the same bytes:

- compiled (tokens.pxd), new_token takes the next 20 bytes of the batch by moving a C index, and
  writes them in hex, with no Python code in between (the GIL is held throughout): about 150
  instructions a token;
- uncompiled, the batch's 64 tokens are made at once and handed out with deque.popleft, which is
  atomic.

A forked child forgets the batch read before the fork (forget_batch), so that it never hands out a
token its parent may hand out too.
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
_TOKEN_BYTES = TOKEN_BYTES  # (a C constant once compiled: see tokens.pxd)
_BATCH_BYTES = TOKEN_BYTES * _BATCH

# compiled: the batch's random bytes, and where the next token's start
_random = b""
_next = _BATCH_BYTES
# uncompiled: the batch's tokens
_ready: deque[bytes] = deque()
_take = _ready.popleft


def new_token() -> bytes:
    """A fresh token (40 hex characters, as bytes)."""
    global _random, _next
    if cython.compiled:
        at = _next
        if at >= _BATCH_BYTES:
            # (os.urandom may let other threads run: they take from the old batch, or read one
            # of their own; either way each token's bytes are handed out once)
            fresh = os.urandom(_BATCH_BYTES)
            _random = fresh
            at = 0
        _next = at + _TOKEN_BYTES
        token: bytes = hex_token(_random, at, _TOKEN_BYTES)  # type: ignore[name-defined]  # noqa: F821
    else:
        token = _from_ready()
    return token


def _from_ready() -> bytes:
    """Uncompiled: the next of the batch's tokens, made at once."""
    while True:
        try:
            return _take()
        except IndexError:
            # One hex string with a space after each token's 40 characters, split: the batch's
            # tokens in three calls into C (slicing it token by token in Python costs some 900
            # instructions a token).
            _ready.extend(hexlify(os.urandom(_BATCH_BYTES), b" ", TOKEN_BYTES).split())


def forget_batch() -> None:
    """Drops what is left of the batch: the next token comes from a fresh read of the OS CSPRNG
    (run in a forked child)."""
    global _next
    _next = _BATCH_BYTES
    _ready.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=forget_batch)
