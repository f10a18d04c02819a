"""The `each_value_once` cover (tests/support/thinning.py): every value of every parameter of a
marked test still runs, in fewer cells; unmarked tests and one-parameter grids are untouched."""

from __future__ import annotations

import itertools
from types import SimpleNamespace

from thinning import MARKER, kept_cells


def grid_items(name: str, marked: bool, **axes: list[str]) -> list[SimpleNamespace]:
    names = list(axes)
    items = []
    for values in itertools.product(*axes.values()):
        params = dict(zip(names, values))
        items.append(
            SimpleNamespace(
                path="tests/x.py",
                originalname=name,
                name=f"{name}[{'-'.join(values)}]",
                callspec=SimpleNamespace(params=params),
                get_closest_marker=lambda m, marked=marked: (
                    object() if marked and m == MARKER else None
                ),
            )
        )
    return items


def values_run(items, axis: str) -> set[str]:
    return {it.callspec.params[axis] for it in items}


def test_each_value_of_each_parameter_runs_in_fewer_cells():
    axes = dict(engine=["native", "python"], loop=["asyncio", "uvloop"], kind=list("abcde"))
    items = grid_items("t", True, **axes)
    kept, deselected = kept_cells(items)
    assert len(kept) == 5 and len(deselected) == 15
    for axis, values in axes.items():
        assert values_run(kept, axis) == set(values), axis


def test_two_by_two_keeps_the_diagonal():
    kept, _ = kept_cells(grid_items("t", True, engine=["native", "python"], api=["sync", "async"]))
    assert sorted(it.name for it in kept) == ["t[native-sync]", "t[python-async]"]


def test_unmarked_tests_and_one_parameter_grids_keep_every_cell():
    unmarked = grid_items("u", False, engine=["native", "python"], api=["sync", "async"])
    single = grid_items("s", True, engine=["native", "python"])
    kept, deselected = kept_cells(unmarked + single)
    assert len(kept) == 6 and not deselected
