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
    # One hex string with a space after each token's 40 characters, split: the batch's tokens in
    # three calls into C (slicing it token by token cost some 900 instructions per token).
    _ready.extend(hexlify(os.urandom(TOKEN_BYTES * _BATCH), b" ", TOKEN_BYTES).split())


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_ready.clear)
