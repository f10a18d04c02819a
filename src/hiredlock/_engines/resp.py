"""RESP2, the Redis protocol, for the pure-Python engine: commands to bytes, bytes to replies.

No I/O here: the engine feeds the reader what its sockets received and takes replies out.

Replies: a simple string is bytes, an error a ReplyError (its full text, code included: "NOSCRIPT
...", "WRONGPASS ..."), an integer an int, a bulk string bytes or None, an array a list or None.
Bytes that are not RESP2 raise ProtocolError, and so does a reply that would take more than
`max_bytes` (ReplyTooLarge): it is refused as soon as that is known (a bulk or array length says
so), or once that many bytes are pending without making a reply, so a master cannot make us read a
huge reply into memory. After a ProtocolError the stream cannot be trusted: drop the connection.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional, Union

from .._core.scripts import MAX_REPLY_BYTES

# Arrays nested deeper than this are refused (no lock command gets a nested reply at all).
MAX_DEPTH = 8


class ReplyError:
    """An error reply: its text as the server sent it, code included."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return f"ReplyError({self.text!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ReplyError) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)


class ProtocolError(Exception):
    """The bytes received are not a RESP2 reply."""


class ReplyTooLarge(ProtocolError):
    """A reply larger than the reader accepts."""


class _NotReady:
    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_READY"


NOT_READY: Any = _NotReady()  # what Reader.get returns until a whole reply is there


def pack_command(args: Sequence[bytes]) -> bytes:
    """One command as a RESP array of bulk strings."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        out.append(b"$%d\r\n%s\r\n" % (len(arg), arg))
    return b"".join(out)


def pack_auth(username: Optional[str], password: str) -> bytes:
    """AUTH [username] password."""
    if username is None:
        return pack_command((b"AUTH", password.encode()))
    return pack_command((b"AUTH", username.encode(), password.encode()))


def pack_set_nx_px(key: bytes, value: bytes, ttl: bytes) -> bytes:
    """SET key value NX PX ttl: the acquire command, in one formatting step."""
    return b"*6\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n$2\r\nNX\r\n$2\r\nPX\r\n$%d\r\n%s\r\n" % (
        len(key),
        key,
        len(value),
        value,
        len(ttl),
        ttl,
    )


_Buffer = Union[bytes, bytearray]


def _length(buf: _Buffer, start: int, end: int, what: str) -> int:
    """The decimal number in buf[start:end]: digits with an optional minus sign, nothing else."""
    text = buf[start:end]
    digits = text[1:] if text[:1] == b"-" else text
    if not digits.isdigit() or len(digits) > 19:
        raise ProtocolError(f"bad {what}: {bytes(text[:40])!r}")
    return int(text)


class Reader:
    """Incremental RESP2 reader: feed() bytes as they come, get() replies as they complete."""

    __slots__ = ("_buf", "_pos", "max_bytes")

    def __init__(self, max_bytes: int = MAX_REPLY_BYTES) -> None:
        self._buf: _Buffer = b""
        self._pos = 0
        self.max_bytes = max_bytes

    def pending(self) -> int:
        """Bytes received and not yet taken as a reply."""
        return len(self._buf) - self._pos

    def feed(self, data: bytes) -> None:
        buf = self._buf
        pos = self._pos
        if pos >= len(buf):
            self._buf = data  # the usual case: nothing left over, no copy
            self._pos = 0
        elif type(buf) is bytearray:
            if pos > 4096:
                del buf[:pos]
                self._pos = 0
            buf += data
        else:
            grown = bytearray(buf[pos:])
            grown += data
            self._buf = grown
            self._pos = 0

    def get(self) -> Any:
        """The next whole reply, or NOT_READY. Raises ProtocolError (ReplyTooLarge)."""
        buf = self._buf
        pos = self._pos
        if pos >= len(buf):
            return NOT_READY
        reply, end = self._parse(buf, pos, 0)
        if reply is NOT_READY:
            if len(buf) - pos > self.max_bytes:
                raise ReplyTooLarge(
                    f"reply too large: over {self.max_bytes} bytes pending and not complete"
                )
            return NOT_READY
        self._pos = end
        return reply

    def _parse(self, buf: _Buffer, pos: int, depth: int) -> tuple[Any, int]:
        """(reply, position after it), or (NOT_READY, pos) when it has not all arrived yet."""
        end = buf.find(b"\r\n", pos)
        if end < 0:
            if pos < len(buf) and buf[pos] not in b"+-:$*":
                raise ProtocolError(f"unexpected reply type {bytes(buf[pos : pos + 1])!r}")
            return NOT_READY, pos
        kind = buf[pos]
        if kind == 43:  # '+'
            return bytes(buf[pos + 1 : end]), end + 2
        if kind == 58:  # ':'
            return _length(buf, pos + 1, end, "integer"), end + 2
        if kind == 36:  # '$'
            size = _length(buf, pos + 1, end, "bulk length")
            if size < 0:
                if size != -1:
                    raise ProtocolError(f"bad bulk length: {size}")
                return None, end + 2
            if size > self.max_bytes:
                raise ReplyTooLarge(f"reply too large: a bulk string of {size} bytes")
            start = end + 2
            stop = start + size
            if len(buf) < stop + 2:
                return NOT_READY, pos
            if buf[stop : stop + 2] != b"\r\n":
                raise ProtocolError("a bulk string not followed by CRLF")
            return bytes(buf[start:stop]), stop + 2
        if kind == 45:  # '-'
            return ReplyError(bytes(buf[pos + 1 : end]).decode("utf-8", "replace")), end + 2
        if kind == 42:  # '*'
            count = _length(buf, pos + 1, end, "array length")
            if count < 0:
                if count != -1:
                    raise ProtocolError(f"bad array length: {count}")
                return None, end + 2
            if count * 3 > self.max_bytes:  # each element takes 3 bytes at least
                raise ReplyTooLarge(f"reply too large: an array of {count} elements")
            if depth >= MAX_DEPTH:
                raise ProtocolError("arrays nested too deep")
            items = []
            at = end + 2
            for _ in range(count):
                item, at = self._parse(buf, at, depth + 1)
                if item is NOT_READY:
                    return NOT_READY, pos
                items.append(item)
            return items, at
        raise ProtocolError(f"unexpected reply type {bytes(buf[pos : pos + 1])!r}")


# A release notice as a master pushes it (the scripts publish an empty payload: see
# _core/scripts.py), sharded or not: most of what a release-notice subscriber reads
# (_engines/notices.py), so read without the Reader (leading_notices).
_SMESSAGE_HEAD = b"*3\r\n$8\r\nsmessage\r\n$"
_MESSAGE_HEAD = b"*3\r\n$7\r\nmessage\r\n$"
_EMPTY_PAYLOAD = b"\r\n$0\r\n\r\n"


def leading_notices(data: bytes) -> tuple[list[bytes], int]:
    """The channels of the release notices (whole `message` or `smessage` pushes with an empty
    payload) at the head of `data`, and where the rest begins: anything else, or a push not
    whole yet, is left to the Reader."""
    channels: list[bytes] = []
    pos = 0
    while True:
        if data.startswith(_SMESSAGE_HEAD, pos):
            head = pos + len(_SMESSAGE_HEAD)
        elif data.startswith(_MESSAGE_HEAD, pos):
            head = pos + len(_MESSAGE_HEAD)
        else:
            return channels, pos
        crlf = data.find(b"\r\n", head, head + 21)  # (the channel's length: 19 digits at most)
        digits = data[head:crlf]
        if crlf < 0 or not digits.isdigit():
            return channels, pos
        start = crlf + 2
        stop = start + int(digits)
        if data[stop : stop + len(_EMPTY_PAYLOAD)] != _EMPTY_PAYLOAD:
            return channels, pos
        channels.append(data[start:stop])
        pos = stop + len(_EMPTY_PAYLOAD)
