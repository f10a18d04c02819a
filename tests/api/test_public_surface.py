"""What users see of the package: the classes under hiredlock (and hiredlock.aio), not the modules
they are written in; the old module paths (hiredlock.lock, hiredlock.redlock, ...) still import,
with a DeprecationWarning that says where to import from."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

import hiredlock

OLD_MODULES = {
    "lock": ["Lock"],
    "redlock": ["KeyState", "Redlock", "Removed"],
    "semaphore": ["Permit", "Semaphore"],
    "rlock": ["RLock"],
    "rwlock": ["RWLock", "ReadLock", "WriteLock"],
    "fairlock": ["FairLock"],
    "multilock": ["MultiLock"],
}


def test_importing_hiredlock_shows_no_module_beside_its_classes():
    # (a fresh interpreter: this one may have imported the old modules already)
    code = (
        "import hiredlock, types; "
        "print(sorted(n for n in dir(hiredlock) if not n.startswith('_') "
        "and isinstance(getattr(hiredlock, n), types.ModuleType)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_every_public_name_is_in_all_and_none_is_a_module():
    names = set(hiredlock.__all__) - {"__version__"}
    assert all(hasattr(hiredlock, name) for name in names)
    assert not [n for n in names if type(getattr(hiredlock, n)).__name__ == "module"]


@pytest.mark.parametrize("module", sorted(OLD_MODULES))
def test_an_old_module_path_still_imports_and_warns(module):
    sys.modules.pop(f"hiredlock.{module}", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        old = importlib.import_module(f"hiredlock.{module}")
    for name in OLD_MODULES[module]:
        assert getattr(old, name) is getattr(hiredlock, name)
    messages = [str(w.message) for w in caught if w.category is DeprecationWarning]
    assert messages == [
        f"hiredlock.{module} is deprecated and will be removed: import "
        f"{', '.join(OLD_MODULES[module])} from hiredlock"
    ]
