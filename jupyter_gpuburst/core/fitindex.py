"""The free-capacity index: which nodes of a site can take a pod, best fit first, without a scan.

For every site and GPU resource, nodes are grouped by how many units of that GPU they have free
(the *level*), and within a level by a coarse *grade* of their free CPU and free memory. Pods and
reservations move a node between groups the same way, so a lookup never depends on how many
reservations are outstanding: it walks the levels upward from the GPU count asked for (best fit:
fewest GPUs stranded), and in a level takes the smallest grade that is known to fit.

Grades follow a geometric grid with two steps per doubling (1, 1.5, 2, 3, 4, 6, 8, 12, ... units
of 125 millicores or 1 MiB), so the round numbers profiles ask for (1, 2, 4, 8, 16 CPU; 1, 2, 4,
8, 16 GiB) fall on grade boundaries: a whole grade either fits or does not, and only requests off
the grid look at single nodes in the one grade that straddles them.

The index is nested persistent maps (``immutables.Map``) whose leaves are bit sets:
``(site, resource) -> level -> grade -> members``, where ``members`` is an ``int`` with bit
``slot`` set for every node filed there (the inventory gives each node a small slot number and
keeps slot -> name). A snapshot holds the outer map.

Why bits and not a map of names: the biggest groups of a 50,000-node site hold a few thousand
nodes, and a persistent map that size is three levels of 32-way nodes; moving one node out of
one group and into another copied those paths, touching the reference counts of some 150
scattered objects per pod event (9 µs, the slowest step of a watch event at that scale), and
left that many new objects for the garbage collector. Flipping one bit of an ``int`` copies a
few kilobytes of contiguous memory (under half a microsecond), the maps above it stay a handful
of entries each, and an ``int`` is never tracked by the collector. Reading a group's members
(``members``) costs a scan of its bytes, paid by decisions, which read one group or a few.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping

from immutables import Map

from .quantities import CPU, MEMORY

CPU_UNIT = 125  # millicores
MEMORY_UNIT = 2**20  # bytes
_GRADES = 2 * 64 + 2
_MEM_BITS = 8  # grade key = cpu grade << 8 | memory grade

EMPTY: Map = Map()


def grade(value: int, unit: int) -> int:
    """The grid cell of ``value``: 0 below one unit, then two cells per doubling."""
    q = value // unit
    if q <= 0:
        return 0
    k = q.bit_length() - 1
    if k >= 1 and q >= 3 << (k - 1):
        return 2 * k + 2
    return 2 * k + 1


def _floor(g: int) -> int:
    """Smallest multiple of the unit in grade ``g`` (grade 2 does not occur)."""
    if g == 0:
        return 0
    k, half = divmod(g - 1, 2)
    if half:
        return 3 << (k - 1) if k >= 1 else 2
    return 1 << k


_FLOORS = [_floor(g) for g in range(_GRADES + 1)]
# the first value above grade g: where the next grade that exists starts
_CEILINGS = [1 if g == 0 else 2 if g == 1 else _FLOORS[g + 1] for g in range(_GRADES)]


def grade_key(cpu_free: int, memory_free: int) -> int:
    # ``grade`` twice, written out: every pod event computes two of these
    q = cpu_free // CPU_UNIT
    if q <= 0:
        key = 0
    else:
        k = q.bit_length() - 1
        key = (2 * k + 2 if k >= 1 and q >= 3 << (k - 1) else 2 * k + 1) << _MEM_BITS
    q = memory_free // MEMORY_UNIT
    if q <= 0:
        return key
    k = q.bit_length() - 1
    return key | (2 * k + 2 if k >= 1 and q >= 3 << (k - 1) else 2 * k + 1)


def _grade_fit(g: int, unit: int, need: int) -> int:
    """1: every value in grade g is >= need; 0: some may be; -1: none is."""
    if _FLOORS[g] * unit >= need:
        return 1
    if _CEILINGS[g] * unit <= need:
        return -1
    return 0


def members(bits: int) -> Iterator[int]:
    """The slots set in ``bits``, lowest first.

    The first few come from the lowest set bit (a few full-width passes over the ``int``, about
    3 µs for a 50,000-slot group), because a decision usually takes the first member of the first
    group it reads; the rest from one scan of the int's bytes, which costs about 60 µs for
    50,000 slots however few are set (``to_bytes`` and the search both walk every byte).
    """
    for _ in range(_FIRST_BY_LOWEST_BIT):
        if not bits:
            return
        low = bits & -bits
        yield low.bit_length() - 1
        bits ^= low
    if not bits:
        return
    data = bits.to_bytes((bits.bit_length() + 7) >> 3, "little")
    for match in _NONZERO_BYTE.finditer(data):
        offset = match.start()
        byte, base = data[offset], offset << 3
        while byte:
            low = byte & -byte
            yield base + low.bit_length() - 1
            byte ^= low


_FIRST_BY_LOWEST_BIT = 8
_NONZERO_BYTE = re.compile(rb"[^\x00]")


def add(index: Map, key: tuple[str, str], level: int, gkey: int, slot: int) -> Map:
    levels = index.get(key, EMPTY)
    grades = levels.get(level, EMPTY)
    return index.set(key, levels.set(level, grades.set(gkey, grades.get(gkey, 0) | 1 << slot)))


def discard(index: Map, key: tuple[str, str], level: int, gkey: int, slot: int) -> Map:
    return move(index, key, (level, gkey), None, slot)


def move(index: Map, key: tuple[str, str], before: tuple[int, int] | None, after: tuple[int, int] | None, slot: int) -> Map:
    """``discard`` from (level, grade) ``before`` then ``add`` at ``after`` (None: not filed),
    with one update of the outer map instead of two: the hot path of every pod event."""
    levels = index.get(key, EMPTY)
    bit = 1 << slot
    if before is not None:
        level, gkey = before
        grades = levels.get(level)
        bits = grades.get(gkey, 0) if grades is not None else 0
        if bits & bit:
            bits ^= bit
            grades = grades.set(gkey, bits) if bits else grades.delete(gkey)  # type: ignore[union-attr]
            levels = levels.set(level, grades) if len(grades) else levels.delete(level)
    if after is not None:
        level, gkey = after
        grades = levels.get(level, EMPTY)
        levels = levels.set(level, grades.set(gkey, grades.get(gkey, 0) | bit))
    if len(levels):
        return index.set(key, levels)
    return index.delete(key) if key in index else index


def levels(index: Map, site: str, resource: str) -> list[int]:
    """Distinct free counts of ``resource`` on the nodes of ``site``, ascending."""
    return sorted(index.get((site, resource), EMPTY))


def nodes_at(index: Map, site: str, resource: str, level: int) -> Iterator[int]:
    """The slots of the nodes of ``site`` with ``level`` units of ``resource`` free."""
    for bits in index.get((site, resource), EMPTY).get(level, EMPTY).values():
        yield from members(bits)


# nodes that have the pod's images looked at (checked to fit) in the best level, at most
IMAGE_SCAN = 16


def best_fit(
    index: Map,
    site: str,
    resource: str,
    demand: Mapping[str, int],
    fits: Callable[[int], bool],
    prefer: tuple[int, ...] = (),
) -> tuple[int, int, bool] | None:
    """(slot, its free units of ``resource``, whether it is in ``prefer``) for the
    best-fitting node of ``site``, or None.

    ``demand`` is the whole pod; ``fits(slot)`` checks one node exactly. Levels are tried
    upward from the GPU count; within a level, grades that cannot fit are skipped unread,
    grades that surely fit cost one check, straddling grades are read node by node.

    ``prefer``: bit sets of slots (the nodes that have the pod's images, best first). The
    level stays the rule (fewest GPUs stranded): a level is reached only when no lower one has
    a node that fits. Within it, a node of the first set that fits wins, then of the next, then
    the first fit. A set is intersected with each grade of the level (one ``&`` of two ints),
    so nodes without the images are never read; at most ``IMAGE_SCAN`` of those with them are
    checked, for grades that straddle the pod's CPU or memory.
    """
    per_level = index.get((site, resource))
    if per_level is None:
        return None
    count = demand.get(resource, 0)
    need_cpu = demand.get(CPU, 0)
    need_memory = demand.get(MEMORY, 0)
    mask = (1 << _MEM_BITS) - 1
    for level in sorted(per_level):
        if level < count:
            continue
        grades = per_level[level]
        candidates = []
        for gkey in grades:
            cpu_fit = _grade_fit(gkey >> _MEM_BITS, CPU_UNIT, need_cpu)
            if cpu_fit < 0:
                continue
            memory_fit = _grade_fit(gkey & mask, MEMORY_UNIT, need_memory)
            if memory_fit < 0:
                continue
            # smallest sure fit first (keeps big nodes for big pods), straddling grades after
            candidates.append((cpu_fit + memory_fit < 2, (gkey >> _MEM_BITS) + (gkey & mask), gkey))
        candidates.sort()
        if prefer:
            found = _first_preferred(grades, candidates, fits, prefer)
            if found is not None:
                return found, level, True
        for _straddles, _size, gkey in candidates:
            for slot in members(grades[gkey]):
                if fits(slot):
                    return slot, level, False
    return None


def _first_preferred(
    grades: Map, candidates: list[tuple[bool, int, int]], fits: Callable[[int], bool], prefer: tuple[int, ...]
) -> int | None:
    """The first node of one level that fits, of the first ``prefer`` set that has one; None
    after ``IMAGE_SCAN`` nodes of the sets were checked."""
    looked = 0
    for wanted in prefer:
        for _straddles, _size, gkey in candidates:
            having = grades[gkey] & wanted
            if not having:
                continue
            for slot in members(having):
                looked += 1
                if looked > IMAGE_SCAN:
                    return None
                if fits(slot):
                    return slot
    return None
