"""The deterministic simulation (sim/ at the top of the tree): the library's own steps for many
clients against masters in memory, on virtual time, with faults and invariants.

No redis-server and no engine here: the simulator drives the step generators itself (they are the
same for both engines and both APIs), so there is nothing to run per engine.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

from hiredlock import _compiled  # noqa: E402
from sim import campaign, variants  # noqa: E402
from sim.checks import Violation  # noqa: E402

# Seeds that cover every kind and fault; CI_LIFETIMES in all (about a minute on 2 busy cores).
CI_LIFETIMES = 20_000
CI_SEED = 1_000


def test_invariants_hold_over_the_ci_lifetimes() -> None:
    summary = campaign.run(CI_LIFETIMES, CI_SEED)
    assert summary.lifetimes >= CI_LIFETIMES
    # what was exercised: every fault, and the outcomes that only faults give
    for fault in ("loss", "slow", "stop", "crash", "volatile", "drift", "step", "pause"):
        assert summary.faults[fault] > 0, fault
    assert summary.faults["interrupt"] > 0
    for outcome in ("acquired", "released", "renewed", "extended", "not acquired"):
        assert summary.outcomes[outcome] > 0, outcome
    assert summary.outcomes["release raised LockLost"] > 0


# Each broken variant is caught within this many lifetimes from seed 0 (measured: see the note
# in sim/variants.py's VARIANTS; the bound leaves room).
BOUND = 4_000


@pytest.mark.skipif(
    bool(_compiled.compiled_modules()),
    reason="the broken variants patch the algorithm's .py methods, which its compiled modules "
    "call in C past the patch (CI runs the simulation uncompiled)",
)
@pytest.mark.parametrize("variant", sorted(variants.VARIANTS))
def test_a_broken_variant_is_caught(variant: str) -> None:
    with variants.applied(variant), pytest.raises(Violation) as caught:
        campaign.run(BOUND, 0)
    assert "replays: python -m sim --seed" in str(caught.value)


def test_a_violation_replays_from_its_seed() -> None:
    with variants.applied("quorum-of-half"), pytest.raises(Violation) as first:
        campaign.run(BOUND, 0)
    seed = first.value.seed
    with variants.applied("quorum-of-half"), pytest.raises(Violation) as again:
        campaign.run(campaign.LIFETIMES_PER_SEED, seed)
    assert again.value.what == first.value.what


def test_the_command_exits_non_zero_on_a_violation_naming_the_seed() -> None:
    run = subprocess.run(
        [sys.executable, "-m", "sim", "--lifetimes", "400", "--variant", "quorum-of-half"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1
    assert "INVARIANT VIOLATED: seed" in run.stderr
