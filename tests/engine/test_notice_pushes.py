"""What a release-notice subscriber reads of the pushes it gets (no I/O, no servers): the notices
read without the RESP reader (leading_notices) and everything else through it give the same
messages, in order, however the stream is cut into reads."""

from __future__ import annotations

from hiredlock._core.masters import MasterSpec
from hiredlock._engines.notices import Subscriber
from hiredlock._engines.resp import leading_notices, pack_command


def push(kind: bytes, channel: bytes, payload: bytes = b"") -> bytes:
    """A push as a master writes it (an array of three bulk strings)."""
    return pack_command((kind, channel, payload))


def confirmation(kind: bytes, channel: bytes) -> bytes:
    return b"*3\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n:1\r\n" % (len(kind), kind, len(channel), channel)


TRICKY = b"hiredlock:released:{a\r\n$0\r\n\r\n*3}"  # (a name may hold any bytes)
STREAM = [
    (push(b"smessage", b"hiredlock:released:{one}"), (b"message", b"hiredlock:released:{one}")),
    (push(b"message", b"hiredlock:released:{two}"), (b"message", b"hiredlock:released:{two}")),
    (confirmation(b"ssubscribe", b"c3"), (b"subscribe", b"c3")),
    (push(b"smessage", b"c4", b"someone else's"), (b"message", b"c4")),
    (push(b"smessage", TRICKY), (b"message", TRICKY)),
    (push(b"message", b""), (b"message", b"")),
    (push(b"smessage", b"c7"), (b"message", b"c7")),
]


class Fed(Subscriber):
    """A subscriber whose reads return the given chunks, one per on_readable()."""

    def __init__(self, chunks: list[bytes]) -> None:
        super().__init__(MasterSpec(host="127.0.0.1", port=1))
        self.chunks = chunks

    def receive(self) -> bytes:
        return self.chunks.pop(0)


def read_all(chunks: list[bytes]) -> tuple[list[tuple[bytes, bytes]], Fed]:
    subscriber = Fed(list(chunks))
    out: list[tuple[bytes, bytes]] = []
    while subscriber.chunks:
        out += subscriber.on_readable()
    return out, subscriber


def test_the_notices_at_the_head_of_a_read():
    data = b"".join(raw for raw, _ in STREAM)
    channels, taken = leading_notices(data)
    assert channels == [b"hiredlock:released:{one}", b"hiredlock:released:{two}"]
    assert data[taken:].startswith(confirmation(b"ssubscribe", b"c3"))
    whole = push(b"smessage", b"c7")
    for cut in range(len(whole)):  # (a push not whole yet is the reader's)
        assert leading_notices(whole[:cut]) == ([], 0)
    assert leading_notices(push(b"smessage", b"c", b"x")) == ([], 0)
    assert leading_notices(b"*3\r\n$8\r\nsmessage\r\n$x\r\n") == ([], 0)


def test_every_cut_of_the_stream_reads_the_same_messages():
    data = b"".join(raw for raw, _ in STREAM)
    expected = [message for _, message in STREAM]
    for cut in range(1, len(data)):
        out, subscriber = read_all([data[:cut], data[cut:]])
        assert out == expected, cut
        assert subscriber.confirmed == {b"c3"}
    out, _ = read_all([data[i : i + 1] for i in range(len(data))])
    assert out == expected
    out, _ = read_all([raw for raw, _ in STREAM])
    assert out == expected
