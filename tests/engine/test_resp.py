"""The pure-Python engine's RESP2 writer and incremental reader (no I/O, no servers)."""

from __future__ import annotations

import pytest

from hiredlock._engines.resp import (
    NOT_READY,
    ProtocolError,
    Reader,
    ReplyError,
    ReplyTooLarge,
    pack_command,
    pack_set_nx_px,
)

REPLIES = [
    (b"+OK\r\n", b"OK"),
    (b"-NOSCRIPT No matching script.\r\n", ReplyError("NOSCRIPT No matching script.")),
    (b":-42\r\n", -42),
    (b"$5\r\nhe\r\no\r\n", b"he\r\no"),
    (b"$0\r\n\r\n", b""),
    (b"$-1\r\n", None),
    (b"*-1\r\n", None),
    (b"*3\r\n:1\r\n$-1\r\n*1\r\n+x\r\n", [1, None, [b"x"]]),
]


def replies(reader):
    out = []
    while (reply := reader.get()) is not NOT_READY:
        out.append(reply)
    return out


def test_commands_are_arrays_of_bulk_strings():
    assert pack_command((b"GET", b"k")) == b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n"
    assert pack_set_nx_px(b"k", b"tok", b"100") == pack_command(
        (b"SET", b"k", b"tok", b"NX", b"PX", b"100")
    )


def test_replies_whole_and_byte_by_byte():
    stream = b"".join(data for data, _ in REPLIES)
    expected = [reply for _, reply in REPLIES]
    whole = Reader()
    whole.feed(stream)
    assert replies(whole) == expected
    dripped = Reader()
    got = []
    for i in range(len(stream)):
        dripped.feed(stream[i : i + 1])
        got.extend(replies(dripped))
    assert got == expected
    assert dripped.pending() == 0


@pytest.mark.parametrize(
    "data",
    [b"?what\r\n", b":12x\r\n", b": 1\r\n", b"$-5\r\n", b"*-2\r\n", b"$3\r\nabcde\r\n", b"%1\r\n"],
)
def test_malformed_replies_raise(data):
    reader = Reader()
    reader.feed(data)
    with pytest.raises(ProtocolError):
        reader.get()


TOO_LARGE = [
    b"$65537\r\n",
    b"*30000\r\n",
    b"+" + b"O" * 70000,
    b"*2\r\n$60000\r\n" + b"x" * 60000 + b"\r\n$60000\r\n" + b"x" * 6000,
]


@pytest.mark.parametrize("data", TOO_LARGE)
def test_replies_past_the_size_bound_raise_at_once(data):
    reader = Reader(max_bytes=65536)
    reader.feed(data)
    with pytest.raises(ReplyTooLarge, match="reply too large"):
        reader.get()
