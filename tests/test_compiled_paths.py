"""The hot-path helpers that take a C branch once compiled (hiredlock/_compiled.py) give what their
Python branch gives: this module runs in both modes (CI runs it compiled and uncompiled), and each
test states the Python meaning the C code must keep."""

from __future__ import annotations

import time

from hiredlock._core import clock, judgement


def test_valid_until_truncates_the_ttl_less_drift_toward_zero():
    assert judgement.valid_until_ns(10, 30000, 302.0) == 10 + 29_698_000_000
    assert judgement.valid_until_ns(0, 1.0000015, 0.0) == 1_000_001  # (1,000,001.5 truncated)
    assert judgement.valid_until_ns(5, 1.0, 3.0000015) == 5 - 2_000_001  # (toward zero)


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
