"""Engine selection, checked in clean subprocesses (HIREDLOCK_IMPL read at import)."""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys

import pytest
from support import no_extensions as _no_extensions

PROBE = r"""
import json, os, sys
import hiredlock
rl = hiredlock.Redlock([sys.argv[1]])
out = {"backend": rl.backend, "available": list(hiredlock.available_backends()),
       "pkg": os.path.dirname(os.path.abspath(hiredlock.__file__))}
native = sys.modules.get("hiredlock._native")
out["native_file"] = getattr(native, "__file__", None)
out["native_loaded"] = native is not None
lk = rl.lock("backend-probe-" + str(os.getpid()), 5)
out["acquired"] = lk.acquire(blocking=False)
lk.release()
rl.close()
print(json.dumps(out))
"""


def run_probe(url, tmp_path, impl=None):
    env = {k: v for k, v in os.environ.items() if k != "HIREDLOCK_IMPL"}
    if impl is not None:
        env["HIREDLOCK_IMPL"] = impl
    return subprocess.run(
        [sys.executable, "-c", PROBE, url],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


pytestmark = pytest.mark.subprocess


def test_default_is_native(masters5, tmp_path):
    if _no_extensions():
        pytest.skip("HIREDLOCK_NO_EXTENSIONS=1: the native engine is not expected")
    p = run_probe(masters5[0].url, tmp_path)
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["backend"] == "native", out
    assert out["available"] == ["native", "python"], out
    assert out["native_loaded"], out
    f = out["native_file"]
    assert f and any(f.endswith(sfx) for sfx in importlib.machinery.EXTENSION_SUFFIXES), f
    # imported from the installed package, next to hiredlock/__init__.py (not some stray build dir)
    assert os.path.dirname(os.path.abspath(f)) == out["pkg"], out
    assert out["acquired"] is True


def test_impl_python(masters5, tmp_path):
    p = run_probe(masters5[0].url, tmp_path, "python")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["backend"] == "python", out
    assert out["acquired"] is True


def test_impl_native(masters5, tmp_path):
    p = run_probe(masters5[0].url, tmp_path, "native")
    if _no_extensions():
        # forced but not buildable: must fail loudly, never fall back silently
        assert p.returncode != 0
        assert "ImportError" in p.stderr or "EngineUnavailable" in p.stderr, p.stderr
        return
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["backend"] == "native", out


@pytest.mark.parametrize("value", ["bogus", "pure", "native,python"])
def test_impl_bogus_fails_loudly(masters5, tmp_path, value):
    p = run_probe(masters5[0].url, tmp_path, value)
    assert p.returncode != 0, p.stdout
    assert "HIREDLOCK_IMPL" in p.stderr, p.stderr
    assert "Traceback" in p.stderr


def test_backend_argument(engine, make_redlock, masters5):
    rl = make_redlock([masters5[0].url])
    assert rl.backend == engine
    import hiredlock

    assert engine in hiredlock.available_backends()


def test_backend_auto_prefers_native(masters5):
    import hiredlock

    if os.environ.get("HIREDLOCK_IMPL"):
        pytest.skip("HIREDLOCK_IMPL set for this run")
    with hiredlock.Redlock([masters5[0].url], backend="auto") as rl:
        expected = "python" if _no_extensions() else "native"
        assert rl.backend == expected


def test_backend_bad_value(masters5):
    import hiredlock

    with pytest.raises(ValueError, match="backend"):
        hiredlock.Redlock([masters5[0].url], backend="bogus")
