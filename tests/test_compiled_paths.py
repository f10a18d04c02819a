"""The hot-path helpers that take a C branch once compiled (hiredlock/_compiled.py) give what their
Python branch gives: this module runs in both modes (CI runs it compiled and uncompiled), and each
test states the Python meaning the C code must keep."""

from __future__ import annotations

import binascii
import os
import re
import time

import pytest

from hiredlock._core import clock, judgement, requests, tokens
from hiredlock._core.scripts import TOKEN_BYTES


def test_tokens_are_lowercase_hex_of_fresh_random_bytes():
    made = [tokens.new_token() for _ in range(1000)]
    assert all(re.fullmatch(rb"[0-9a-f]{%d}" % (2 * TOKEN_BYTES), token) for token in made)
    assert len(set(made)) == len(made)
    # every hex digit turns up, each about as often (16 digits, 40,000 of them)
    counts = {digit: 0 for digit in b"0123456789abcdef"}
    for token in made:
        for digit in token:
            counts[digit] += 1
    assert min(counts.values()) > 2000


def test_tokens_are_the_hex_of_the_os_random_bytes(monkeypatch):
    """After forget_batch, tokens are the hex of what os.urandom gives next, token by token, in
    order, and a batch that runs out is followed by a fresh read."""
    reads = []

    def urandom(size):
        data = bytes((len(reads) * 7 + i) % 256 for i in range(size))
        reads.append(data)
        return data

    monkeypatch.setattr(os, "urandom", urandom)
    tokens.forget_batch()
    try:
        made = [tokens.new_token() for _ in range(100)]
    finally:
        tokens.forget_batch()  # (the rest of the session's tokens are random again)
    assert len(reads) == 2, "64 tokens a read"
    expected = binascii.hexlify(b"".join(reads))
    assert b"".join(made) == expected[: 2 * TOKEN_BYTES * 100]
    assert {len(token) for token in made} == {2 * TOKEN_BYTES}


@pytest.mark.parametrize(
    "fields",
    [
        (requests.SetNx, ((b"k",), (b"t",), 30000, 150.0)),
        (requests.RunScript, (b"sha", b"src", 1, ((b"k",),), 150.0, True, False, False, False)),
    ],
)
def test_new_request_is_the_named_tuple_of_its_fields(fields):
    kind, values = fields
    made = requests.new_request(kind, values)
    assert type(made) is kind
    assert made == kind(*values)
    assert tuple(made) == values
    assert made._fields == kind._fields


def test_the_makers_of_the_cycle_requests_give_the_named_tuple_of_their_fields():
    set_nx = requests.new_set_nx((b"k",), (b"t",), 30000, 150.0)
    assert type(set_nx) is requests.SetNx
    assert set_nx == requests.SetNx((b"k",), (b"t",), 30000, 150.0)
    assert set_nx.timeout_ms == 150.0
    fields = (b"sha", b"src", 1, ((b"k", b"t", b"c"),), 150.0, True, False, True, False)
    run_script = requests.new_run_script(*fields)
    assert type(run_script) is requests.RunScript
    assert run_script == requests.RunScript(*fields)
    assert (run_script.wait_all, run_script.honour_backoff, run_script.acquires) == (
        True,
        True,
        False,
    )


def test_valid_until_truncates_the_ttl_less_drift_toward_zero():
    assert judgement.valid_until_ns(10, 30000, 302.0) == 10 + 29_698_000_000
    assert judgement.valid_until_ns(0, 1, -0.0000015) == 1_000_001  # (1,000,001.5 truncated)
    assert judgement.valid_until_ns(5, 1, 3.0000015) == 5 - 2_000_001  # (toward zero)


def test_the_monotonic_clock_is_the_time_modules_until_another_is_put_in():
    before = time.monotonic_ns()
    read = clock.monotonic_ns()
    after = time.monotonic_ns()
    assert before <= read <= after
    replaced = clock.use(lambda: 42, lambda: 7)
    try:
        assert (clock.monotonic_ns(), clock.time_ns()) == (42, 7)
    finally:
        clock.use(*replaced)
    assert clock.monotonic_ns() >= after
