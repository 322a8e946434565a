"""fitindex.move is discard then add, in one update of the outer map."""

from __future__ import annotations

import itertools

from immutables import Map

from jupyter_gpuburst.core import fitindex

KEY = ("origin", "nvidia.com/gpu")


def _filed(index: Map) -> dict:
    return {
        (key, level, grade): sorted(members)
        for key, levels in index.items()
        for level, grades in levels.items()
        for grade, members in grades.items()
    }


def test_move_equals_discard_then_add() -> None:
    index = fitindex.EMPTY
    for name, level, grade in (("a", 1, 10), ("b", 1, 10), ("c", 2, 11)):
        index = fitindex.add(index, KEY, level, grade, name)
    places = [None, (1, 10), (1, 12), (2, 11), (3, 10)]
    for before, after in itertools.product(places, repeat=2):
        for name in ("a", "c", "z"):
            expected = index
            if before is not None:
                expected = fitindex.discard(expected, KEY, before[0], before[1], name)
            if after is not None:
                expected = fitindex.add(expected, KEY, after[0], after[1], name)
            assert _filed(fitindex.move(index, KEY, before, after, name)) == _filed(expected), (before, after, name)


def test_moving_the_last_node_out_leaves_no_empty_maps() -> None:
    index = fitindex.add(fitindex.EMPTY, KEY, 4, 7, "only")
    assert fitindex.move(index, KEY, (4, 7), None, "only") == fitindex.EMPTY
    assert fitindex.move(fitindex.EMPTY, KEY, None, None, "nobody") == fitindex.EMPTY
