"""hiredlock.testing's public surface: what memory_masters() and the clients accept and refuse,
and that `import hiredlock` does not need lupa."""

from __future__ import annotations

import subprocess
import sys

import pytest
from apis import both_apis, make_redlock_fixture  # noqa: F401  (both APIs where marked)

from hiredlock import Redlock
from hiredlock.aio import AsyncRedlock
from hiredlock.testing import memory_masters


@pytest.fixture
def engine() -> str:
    return "memory"


@pytest.fixture(name="api")
def api_fixture() -> str:
    return "sync"


@both_apis
def test_clients_of_memory_masters_use_the_memory_engine(make_redlock, key):
    masters = memory_masters(3)
    rl = make_redlock(masters)
    assert rl.backend == "memory"
    assert [str(spec) for spec in rl.masters] == [f"memory://{masters.name}/{i}" for i in range(3)]
    lock = rl.lock(key, 5)
    assert lock.acquire(blocking=False)
    assert masters.keys(0) == [key.encode()]
    lock.release()


@pytest.mark.parametrize("client", [Redlock, AsyncRedlock])
def test_a_backend_other_than_memory_is_refused_for_memory_masters(client):
    with pytest.raises(
        ValueError, match="backend must be 'auto' or 'memory' for masters in memory"
    ):
        client(memory_masters(3), backend="native")


@pytest.mark.parametrize("client", [Redlock, AsyncRedlock])
def test_the_memory_backend_needs_memory_masters(client):
    with pytest.raises(ValueError, match="backend 'memory' is for masters in memory"):
        client(["redis://127.0.0.1:1"], backend="memory")


def test_memory_masters_and_servers_are_not_mixed():
    masters = memory_masters(2)
    with pytest.raises(ValueError, match="mixes memory masters"):
        Redlock([masters[0], masters[1], "redis://127.0.0.1:1"])


def test_masters_of_two_groups_are_not_mixed():
    one, two = memory_masters(2), memory_masters(1)
    with pytest.raises(ValueError, match="one memory_masters\\(\\) group"):
        Redlock([one[0], one[1], two[0]])


def test_a_master_given_twice_is_refused():
    masters = memory_masters(2)
    with pytest.raises(ValueError, match=r"masters\[1\] duplicates masters\[0\]"):
        Redlock([masters[0], masters[0]])


@pytest.mark.parametrize(
    ("call", "error", "text"),
    [
        (lambda: memory_masters(0), ValueError, "n must be at least 1"),
        (lambda: memory_masters("5"), TypeError, "n must be an int"),
        (lambda: memory_masters(True), TypeError, "n must be an int"),
        (lambda: memory_masters(1, clock=5), TypeError, "clock must be a callable"),
        (lambda: memory_masters(3).stop(3), IndexError, "index 3 is out of range"),
        (lambda: memory_masters(3).kill("0"), TypeError, "index must be an int"),
        (lambda: memory_masters(3).delay(0, -1), ValueError, "seconds must be >= 0"),
        (lambda: memory_masters(3).delay(0, float("nan")), ValueError, "seconds must be finite"),
        (lambda: memory_masters(3).advance("1"), TypeError, "seconds must be a number"),
    ],
)
def test_bad_arguments_are_refused_naming_them(call, error, text):
    with pytest.raises(error, match=text):
        call()


def test_masters_follow_an_injected_clock():
    now = [10**12]
    masters = memory_masters(3, clock=lambda: now[0], sleep=lambda s: None)
    masters.execute(0, "SET", "k", "v", "PX", 100)
    now[0] += 99_000_000
    assert masters.execute(0, "GET", "k") == b"v"
    now[0] += 1_000_000
    assert masters.execute(0, "GET", "k") is None


def test_import_hiredlock_does_not_import_lupa():
    code = (
        "import sys, hiredlock, hiredlock.aio; "
        "assert 'lupa' not in sys.modules, 'lupa imported'; "
        "assert 'hiredlock.testing' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_without_lupa_the_import_error_says_what_to_install():
    code = (
        "import sys; sys.modules['lupa'] = None\n"
        "try:\n"
        "    import hiredlock.testing\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert "hiredlock.testing needs lupa: pip install 'hiredlock[testing]'" in out.stdout
