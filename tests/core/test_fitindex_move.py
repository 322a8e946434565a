"""fitindex.move is discard then add, in one update of the outer map; groups are bit sets."""

from __future__ import annotations

import itertools
import random

from immutables import Map

from jupyter_gpuburst.core import fitindex

KEY = ("origin", "nvidia.com/gpu")


def _filed(index: Map) -> dict:
    return {
        (key, level, grade): list(fitindex.members(bits))
        for key, levels in index.items()
        for level, grades in levels.items()
        for grade, bits in grades.items()
    }


def test_move_equals_discard_then_add() -> None:
    index = fitindex.EMPTY
    for slot, level, grade in ((0, 1, 10), (1, 1, 10), (2, 2, 11)):
        index = fitindex.add(index, KEY, level, grade, slot)
    places = [None, (1, 10), (1, 12), (2, 11), (3, 10)]
    for before, after in itertools.product(places, repeat=2):
        for slot in (0, 2, 25):
            expected = index
            if before is not None:
                expected = fitindex.discard(expected, KEY, before[0], before[1], slot)
            if after is not None:
                expected = fitindex.add(expected, KEY, after[0], after[1], slot)
            assert _filed(fitindex.move(index, KEY, before, after, slot)) == _filed(expected), (before, after, slot)


def test_moving_the_last_node_out_leaves_no_empty_maps() -> None:
    index = fitindex.add(fitindex.EMPTY, KEY, 4, 7, 3)
    assert fitindex.move(index, KEY, (4, 7), None, 3) == fitindex.EMPTY
    assert fitindex.move(fitindex.EMPTY, KEY, None, None, 9) == fitindex.EMPTY


def test_discarding_a_node_filed_elsewhere_changes_nothing() -> None:
    index = fitindex.add(fitindex.EMPTY, KEY, 4, 7, 3)
    assert _filed(fitindex.discard(index, KEY, 4, 7, 5)) == {(KEY, 4, 7): [3]}
    assert _filed(fitindex.discard(index, KEY, 2, 7, 3)) == {(KEY, 4, 7): [3]}


def test_members_lists_every_slot_set_lowest_first() -> None:
    rng = random.Random(4)
    for size in (0, 1, 7, 8, 9, 300):
        slots = sorted(rng.sample(range(60_000), size))
        bits = 0
        for slot in slots:
            bits |= 1 << slot
        assert list(fitindex.members(bits)) == slots
    # every bit of a byte, and bytes of zeros between set ones
    assert list(fitindex.members(0xFF | 1 << 800)) == [0, 1, 2, 3, 4, 5, 6, 7, 800]


def test_grade_key_is_the_cpu_grade_beside_the_memory_grade() -> None:
    rng = random.Random(2)
    values = [0, -3, 1, 124, 125, 249, 250, 374, 375, 500, 2**20 * 3 - 1, 2**20 * 3]
    values += [rng.randrange(2**45) for _ in range(500)] + [2**k for k in range(45)]
    for cpu in values:
        memory = rng.choice(values)
        expected = fitindex.grade(cpu, fitindex.CPU_UNIT) << 8 | fitindex.grade(memory, fitindex.MEMORY_UNIT)
        assert fitindex.grade_key(cpu, memory) == expected, (cpu, memory)
