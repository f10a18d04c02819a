"""The `each_value_once` marker: a heavy test's parameter grid run on a cover of its values.

A test marked `@pytest.mark.each_value_once` and parametrised by several things (engine, API,
event loop, lock kind, ...) runs, by default, on the cells of its grid where every parameter's
value index agrees modulo m (m: the smallest number of values a varying parameter has): every
value of every parameter still runs at least once, in fewer cells (2 x 2 -> 2, 2 x 2 x 5 -> 5).
Meant for the tests that spend seconds per cell waiting on servers (Sentinel outages, cluster
failovers, restart campaigns), where the cheap tests already cover each pair of values.
HIREDLOCK_FULL_MATRIX=1 (`make test-full`) runs every cell, as for the fault matrix
(tests/faults/plugin.py).

campaign() sizes the randomised campaigns (interrupts at random points) the same way: a shorter
run by default, the full one with HIREDLOCK_FULL_MATRIX=1.
"""

from __future__ import annotations

import os
from collections import defaultdict

FULL_MATRIX_ENV = "HIREDLOCK_FULL_MATRIX"
MARKER = "each_value_once"
MARKER_HELP = (
    f"{MARKER}: run the test's parameter grid on a cover where each value of each parameter "
    f"runs once or more ({FULL_MATRIX_ENV}=1: every cell)"
)


def full_matrix_requested() -> bool:
    return os.environ.get(FULL_MATRIX_ENV, "").strip() in {"1", "true", "yes"}


def campaign(full: int, default: int) -> int:
    """The number of iterations of a randomised campaign: `full` with HIREDLOCK_FULL_MATRIX=1
    (`make test-full`), `default` otherwise (`make test`, CI)."""
    return full if full_matrix_requested() else default


def _grid_key(item) -> tuple[str, str]:
    return (str(item.path), getattr(item, "originalname", item.name))


def _value_key(value):
    try:
        hash(value)
    except TypeError:
        return repr(value)
    return value


def kept_cells(items) -> tuple[list, list]:
    """(kept, deselected): the marked tests thinned to their cover, the others all kept."""
    marked = [it for it in items if it.get_closest_marker(MARKER) and hasattr(it, "callspec")]
    # each grid's values, per parameter, in the order collected
    values: dict[tuple[str, str], dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for it in marked:
        grid = values[_grid_key(it)]
        for name, value in it.callspec.params.items():
            if _value_key(value) not in grid[name]:
                grid[name].append(_value_key(value))
    dropped = set()
    for it in marked:
        grid = values[_grid_key(it)]
        varying = {name: seen for name, seen in grid.items() if len(seen) > 1}
        if len(varying) < 2:
            continue  # one varying parameter: every cell is one of its values
        m = min(len(seen) for seen in varying.values())
        params = it.callspec.params
        residues = {seen.index(_value_key(params[name])) % m for name, seen in varying.items()}
        if len(residues) > 1:
            dropped.add(id(it))
    kept = [it for it in items if id(it) not in dropped]
    deselected = [it for it in items if id(it) in dropped]
    return kept, deselected


def pytest_configure(config):
    config.addinivalue_line("markers", MARKER_HELP)


def pytest_collection_modifyitems(config, items):
    if full_matrix_requested():
        return
    kept, deselected = kept_cells(items)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept
