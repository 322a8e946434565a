"""The capacity report admins read: one JSON-able dict built from the capacity tracker.

Only fields listed here leave the hub. Placements are copied field by field from a fixed list,
so whatever else a tracker keeps about a server (its spawner state, tokens, env) cannot leak
into the API or the page.
"""

from __future__ import annotations

from typing import Any, Protocol

from jupyter_gpuburst.core import keys
from jupyter_gpuburst.hub.pools import live as pools

# What an admin may see about one placement; anything else in a tracker's record is dropped.
PLACEMENT_FIELDS: tuple[str, ...] = (
    "site",
    "cluster_id",
    "node",
    "resource",
    "count",
    "reason",
    "state",
    "attempts",
    "namespace",
    "pod",
)


class CapacitySource(Protocol):
    """What the report reads (``jupyter_gpuburst.hub.capacity.tracker.CapacityTracker`` provides it)."""

    ready: bool
    queue_length: int

    def snapshot(self) -> Any: ...

    def placements(self) -> dict[str, dict[str, Any]]: ...


def _placement(server: str, record: dict[str, Any]) -> dict[str, Any]:
    user, _, server_name = server.partition("/")
    out: dict[str, Any] = {"server": server, "user": user, "server_name": server_name}
    for field in PLACEMENT_FIELDS:
        out[field] = record.get(field)
    return out


def _totals(sites: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    totals: dict[str, dict[str, int]] = {}
    for site in sites:
        for resource, numbers in site["resources"].items():
            into = totals.setdefault(resource, {"allocatable": 0, "requested": 0, "free": 0})
            for key in into:
                into[key] += int(numbers.get(key, 0))
    return totals


def capacity_report(tracker: CapacitySource) -> dict[str, Any]:
    """Sites with free/total per GPU resource, donors' readiness, current placements."""
    snapshot = tracker.snapshot()
    sites = snapshot.as_dict()["sites"] if snapshot is not None else []
    # the origin first, then donors by name: the order admins read the page in
    sites.sort(key=lambda s: (s["site"] != keys.ORIGIN_SITE, s["site"]))
    donors = [
        {
            "site": s["site"],
            "cluster_id": s["cluster_id"],
            "ready": s["ready"],
            "nodes_present": s["nodes_present"],
            "nodes_eligible": s["nodes_eligible"],
        }
        for s in sites
        if s["kind"] == "donor"
    ]
    placements = [_placement(server, dict(record)) for server, record in sorted(tracker.placements().items())]
    return {
        "ready": bool(tracker.ready),
        "version": snapshot.version if snapshot is not None else None,
        "sites": sites,
        "totals": _totals(sites),
        "donors": donors,
        "placements": placements,
        "queue_length": int(tracker.queue_length),
        # GPUs held for spawns whose pod is not bound yet; with no spawn in progress, a leak
        "reservations": _reservations(tracker),
        # warm pools apart: their placeholders' GPUs count as free in "sites"
        "pools": pools.report(),
    }


def _reservations(tracker: CapacitySource) -> int:
    placer = getattr(tracker, "placer", None)
    return len(placer.reservations) if placer is not None else 0
