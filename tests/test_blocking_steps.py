"""The direct form of a lock's steps (hiredlock/_sync/blocking_steps.py) is derived from the steps
by tools/blocking_steps.py at build time: it is that tool's output for the lock_steps.py beside it,
and a lock runs it only where its kind keeps LockBase's own steps (the others keep the driver)."""

from __future__ import annotations

import hashlib
import runpy
from pathlib import Path

import pytest

import hiredlock
from hiredlock._core.lock_steps import LockBase
from hiredlock._fairlock import FairLock
from hiredlock._lock import Lock
from hiredlock._multilock import MultiLock
from hiredlock._rwlock import ReadLock, WriteLock
from hiredlock._semaphore import Permit
from hiredlock._sync import blocking_steps
from hiredlock._sync.blocking_steps import direct_acquire, direct_release

PACKAGE = Path(hiredlock.__file__).parent
TOOL = PACKAGE.parent.parent / "tools" / "blocking_steps.py"


def test_the_derived_module_is_the_tools_output_for_these_steps():
    if not TOOL.exists():
        pytest.skip("an installed package: the source tree is not here")
    tool = runpy.run_path(str(TOOL))
    source = (PACKAGE / "_core" / "lock_steps.py").read_text()
    assert (PACKAGE / "_sync" / "blocking_steps.py").read_text() == tool["generate"](source)
    pxd = tool["generate_pxd"]((PACKAGE / "_core" / "lock_steps.pxd").read_text(), source)
    assert (PACKAGE / "_sync" / "blocking_steps.pxd").read_text() == pxd


def test_the_derived_module_names_the_steps_it_came_from():
    # (its import refuses a lock_steps.py edited since: see SOURCE_DIGEST)
    source = (PACKAGE / "_core" / "lock_steps.py").read_bytes()
    assert hashlib.sha256(source).hexdigest() == blocking_steps.SOURCE_DIGEST


@pytest.mark.parametrize("kind", [Lock, ReadLock, WriteLock, MultiLock, Permit])
def test_the_kinds_that_keep_lockbases_steps_run_their_direct_form(kind):
    assert direct_acquire(kind)
    assert direct_release(kind)


def test_a_fair_lock_acquires_with_its_own_attempts_and_releases_directly():
    assert FairLock._attempts is not LockBase._attempts
    assert not direct_acquire(FairLock)
    assert direct_release(FairLock)


def test_a_kind_that_replaces_a_shared_step_keeps_the_driver_for_both():
    class Unlocking(Lock):
        __slots__ = ()

        def _unlock_steps(self, token):  # (reached by both an acquire's and a release's steps)
            yield from super()._unlock_steps(token)

    assert not direct_acquire(Unlocking)
    assert not direct_release(Unlocking)
    assert direct_acquire(Lock)
