"""What a reader of the inventory sees: the capacity of each node and site, in an immutable
``Snapshot`` taken in O(1) (``Inventory.snapshot()``), with the best-fit queries placement asks.

Counts are plain dicts copied on change and never changed after, and the tables are immutable
HAMT maps (``immutables.Map``), so a snapshot never changes under its reader.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from immutables import Map

from . import fitindex
from .quantities import COMPUTE_RESOURCES

EMPTY: Map = Map()
# A node's counts are plain dicts of numbers: copied on every change and never changed once
# made, so a snapshot holding one never sees it move. Dicts that hold only strings and numbers,
# and tuples of them, are invisible to the cyclic garbage collector: 50,000 nodes cost its
# collections nothing. This one is the shared empty value; never write to it.
NO_COUNTS: Mapping[str, int] = {}
_COMPUTE = frozenset(COMPUTE_RESOURCES)


def is_gpu_resource(resource: str) -> bool:
    """Every counted resource that is not CPU, memory, ephemeral storage or pod slots."""
    return resource not in _COMPUTE


class NodeCapacity(NamedTuple):
    """One node as the inventory sees it. ``eligible`` nodes can take new pods."""

    name: str
    site: str
    cluster_id: str | None
    present: bool = False
    ready: bool = False
    eligible: bool = False
    allocatable: Mapping[str, int] = NO_COUNTS
    # by pods bound to the node, and by in-flight spawns placed on it; read-only mappings
    # (dicts the inventory copies on each change, never changes in place)
    requested: Mapping[str, int] = NO_COUNTS
    reserved: Mapping[str, int] = NO_COUNTS
    gpu_resources: tuple[str, ...] = ()  # the GPU resources in allocatable, for the index
    # the images its kubelet reports (``core.images``, normalized); nodes that report the same
    # list share one set, and an update that leaves the list as it was keeps the node's own
    images: frozenset[str] = frozenset()

    @property
    def is_donor(self) -> bool:
        return self.cluster_id is not None

    def free(self, resource: str) -> int:
        if not self.eligible:
            return 0
        return max(0, self.allocatable.get(resource, 0) - self.requested.get(resource, 0) - self.reserved.get(resource, 0))

    def fits(self, demand: Mapping[str, int]) -> bool:
        """The whole ``demand`` fits in what is free on this node now."""
        if not self.eligible:
            return False
        allocatable, requested, reserved = self.allocatable, self.requested, self.reserved
        for resource, amount in demand.items():
            if allocatable.get(resource, 0) - requested.get(resource, 0) - reserved.get(resource, 0) < amount:
                return False
        return True


class Totals(NamedTuple):
    """One resource summed over a site's eligible nodes."""

    allocatable: int = 0
    requested: int = 0
    reserved: int = 0
    free: int = 0  # per node max(0, allocatable - requested - reserved), summed


_ZERO = Totals()


class SiteCapacity(NamedTuple):
    """Aggregates over a site's eligible nodes; ``ready`` says whether any node is eligible.

    ``totals`` holds every counted resource; ``allocatable``/``requested``/``reserved``/``free``
    are the GPU resources only, as the capacity page and the metrics show them.
    """

    site: str
    cluster_id: str | None
    nodes_present: int = 0
    nodes_eligible: int = 0
    totals: Mapping[str, Totals] = EMPTY  # resource -> Totals; read-only, as a node's requests

    @property
    def is_donor(self) -> bool:
        return self.cluster_id is not None

    @property
    def ready(self) -> bool:
        return self.nodes_eligible > 0

    def total(self, resource: str) -> Totals:
        return self.totals.get(resource, _ZERO)

    def _gpu_field(self, index: int) -> Map:
        return Map({r: t[index] for r, t in self.totals.items() if r not in _COMPUTE and t[index]})

    @property
    def allocatable(self) -> Map:
        return self._gpu_field(0)

    @property
    def requested(self) -> Map:
        return self._gpu_field(1)

    @property
    def reserved(self) -> Map:
        return self._gpu_field(2)

    @property
    def free(self) -> Map:
        return self._gpu_field(3)

    def as_dict(self) -> dict[str, Any]:
        def numbers(t: Totals) -> dict[str, int]:
            return {"allocatable": t.allocatable, "requested": t.requested, "free": t.free}

        counted = {r: t for r, t in self.totals.items() if any(t)}
        return {
            "site": self.site,
            "cluster_id": self.cluster_id,
            "kind": "donor" if self.is_donor else "origin",
            "ready": self.ready,
            "nodes_present": self.nodes_present,
            "nodes_eligible": self.nodes_eligible,
            "resources": {r: numbers(counted[r]) for r in sorted(counted) if r not in _COMPUTE},
            # CPU in millicores, memory and ephemeral storage in bytes, pods in slots
            "compute": {r: numbers(counted[r]) for r in COMPUTE_RESOURCES if r in counted},
            # held by spawns in flight (already left out of "free"), every resource
            "reserved": {r: counted[r].reserved for r in sorted(counted) if counted[r].reserved},
        }


class Snapshot(NamedTuple):
    """An immutable view of the inventory at one moment (O(1) to take), reservations included."""

    sites: Map
    nodes: Map
    # (site, GPU resource) -> free units -> CPU/memory grade -> node slots; see ``fitindex``
    index: Map
    # ("user" | "group", name) -> donor GPU units held by pods and reservations
    donor_usage: Map
    version: int
    # slot -> node name, for the slots the index files nodes under
    names: Map = EMPTY
    # normalized image -> bit set of the slots of the nodes that report it (``fitindex``'s bits)
    image_slots: Map = EMPTY

    def site(self, name: str) -> SiteCapacity | None:
        return self.sites.get(name)

    def donors(self) -> list[SiteCapacity]:
        return sorted((s for s in self.sites.values() if s.is_donor), key=lambda s: s.site)

    def free_levels(self, site: str, resource: str) -> list[int]:
        """The distinct per-node free counts of ``resource`` on ``site``, ascending."""
        return fitindex.levels(self.index, site, resource)

    def nodes_with_free(self, site: str, resource: str, free: int) -> Iterator[str]:
        names = self.names
        return (names[slot] for slot in fitindex.nodes_at(self.index, site, resource, free))

    def max_free_on_a_node(self, site: str, resource: str) -> int:
        """Largest number of ``resource`` units free together on one node of ``site``."""
        return max(self.index.get((site, resource), EMPTY), default=0)

    def best_fit(self, site: str, resource: str, demand: Mapping[str, int], images: tuple[str, ...] = ()) -> tuple[str, int, bool] | None:
        """(node, free units of ``resource`` on it, whether it has ``images``) of the node of
        ``site`` that takes the whole ``demand`` and leaves the fewest units of ``resource``
        free, or None. Among the nodes that leave as few, one that already has all of
        ``images`` (normalized, ``core.images``) wins, else one that has the first (the main
        container's), else the first fit: see ``fitindex.best_fit``."""
        nodes, names = self.nodes, self.names

        def fits(slot: int) -> bool:
            node = nodes.get(names.get(slot))
            return node is not None and node.fits(demand)

        prefer: tuple[int, ...] = ()
        if images:
            having = self.image_slots
            main = having.get(images[0], 0)
            if len(images) == 1:
                prefer = (main,) if main else ()
            else:
                every = main
                for image in images[1:]:
                    every &= having.get(image, 0)
                prefer = tuple(bits for bits in (every, main) if bits)
                if len(prefer) == 2 and prefer[0] == prefer[1]:
                    prefer = prefer[:1]
        found = fitindex.best_fit(self.index, site, resource, demand, fits, prefer)
        return None if found is None else (names[found[0]], found[1], found[2])

    def donor_units(self, kind: str, name: str) -> int:
        return self.donor_usage.get((kind, name), 0)

    def as_dict(self) -> dict[str, Any]:
        return {"sites": [self.sites[s].as_dict() for s in sorted(self.sites)], "version": self.version}


def summarize(snapshot: Snapshot, *, compute: bool = False) -> dict[str, dict[str, dict[str, int]]]:
    """A snapshot in ``full_recount``'s shape, for comparisons (reservations not shown)."""
    result: dict[str, dict[str, dict[str, int]]] = {}
    for name, site in snapshot.sites.items():
        if not site.nodes_eligible:
            continue
        per_site = result.setdefault(name, {})
        for resource, t in site.totals.items():
            if not compute and resource in _COMPUTE:
                continue
            if t.allocatable or t.requested:
                per_site[resource] = {"allocatable": t.allocatable, "requested": t.requested, "free": t.free}
    return result
