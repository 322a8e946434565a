"""GPU capacity per site, kept current from Node and Pod watch events.

Every event costs O(1) (a handful of persistent-map updates; no recount), and ``snapshot()`` is
O(1) too: the state lives in immutable HAMT maps (``immutables.Map``), so a snapshot is just the
current set of references and never changes under its reader, however many events follow.

A *site* is ``"origin"`` (the origin's own nodes) or one Liqo donor, named by its cluster id.
Only extended resources that look like GPUs are counted (configurable: exact names plus name
prefixes such as ``nvidia.com/mig-`` for MIG slices).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal, InvalidOperation
from typing import Any

from immutables import Map

from . import keys, liqo

DEFAULT_RESOURCE_NAMES: tuple[str, ...] = ("nvidia.com/gpu", "amd.com/gpu")
DEFAULT_RESOURCE_PREFIXES: tuple[str, ...] = ("nvidia.com/mig-",)

EMPTY: Map = Map()
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
BLOCKING_TAINT_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


def parse_count(value: Any) -> int:
    """An extended-resource quantity as a whole number (GPUs are never fractional)."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int):
        return value
    try:
        number = Decimal(str(value).strip())
    except InvalidOperation:
        raise ValueError(f"not a whole-number quantity: {value!r}") from None
    if number != number.to_integral_value():
        raise ValueError(f"not a whole-number quantity: {value!r}")
    return int(number)


@dataclass(frozen=True)
class NodeCapacity:
    """One node as the inventory sees it. ``eligible`` nodes can take new GPU pods."""

    name: str
    site: str
    cluster_id: str | None
    present: bool = False
    ready: bool = False
    eligible: bool = False
    allocatable: Map = EMPTY
    requested: Map = EMPTY

    @property
    def is_donor(self) -> bool:
        return self.cluster_id is not None

    def free(self, resource: str) -> int:
        if not self.eligible:
            return 0
        return max(0, self.allocatable.get(resource, 0) - self.requested.get(resource, 0))


@dataclass(frozen=True)
class SiteCapacity:
    """Aggregates over a site's eligible nodes; ``ready`` says whether any node is eligible."""

    site: str
    cluster_id: str | None
    nodes_present: int = 0
    nodes_eligible: int = 0
    allocatable: Map = EMPTY
    requested: Map = EMPTY
    free: Map = EMPTY

    @property
    def is_donor(self) -> bool:
        return self.cluster_id is not None

    @property
    def ready(self) -> bool:
        return self.nodes_eligible > 0

    def as_dict(self) -> dict[str, Any]:
        return {
            "site": self.site,
            "cluster_id": self.cluster_id,
            "kind": "donor" if self.is_donor else "origin",
            "ready": self.ready,
            "nodes_present": self.nodes_present,
            "nodes_eligible": self.nodes_eligible,
            "resources": {
                resource: {
                    "allocatable": self.allocatable.get(resource, 0),
                    "requested": self.requested.get(resource, 0),
                    "free": self.free.get(resource, 0),
                }
                for resource in sorted(set(self.allocatable) | set(self.requested))
            },
        }


@dataclass(frozen=True)
class Snapshot:
    """An immutable view of the inventory at one moment (O(1) to take)."""

    sites: Map
    nodes: Map
    # (site, resource) -> {free units: Map of node names with exactly that many free}.
    # Lets placement find the best-fitting node without scanning every node.
    buckets: Map
    # ("user" | "group", name) -> donor GPU units held by running or pending pods.
    donor_usage: Map
    version: int

    def site(self, name: str) -> SiteCapacity | None:
        return self.sites.get(name)

    def donors(self) -> list[SiteCapacity]:
        return sorted((s for s in self.sites.values() if s.is_donor), key=lambda s: s.site)

    def free_levels(self, site: str, resource: str) -> list[int]:
        """The distinct per-node free counts of ``resource`` on ``site``, ascending."""
        return sorted(self.buckets.get((site, resource), EMPTY))

    def nodes_with_free(self, site: str, resource: str, free: int) -> Iterator[str]:
        return iter(self.buckets.get((site, resource), EMPTY).get(free, EMPTY))

    def max_free_on_a_node(self, site: str, resource: str) -> int:
        """Largest number of ``resource`` units free together on one node of ``site``."""
        return max(self.buckets.get((site, resource), EMPTY), default=0)

    def donor_units(self, kind: str, name: str) -> int:
        return self.donor_usage.get((kind, name), 0)

    def as_dict(self) -> dict[str, Any]:
        return {"sites": [self.sites[s].as_dict() for s in sorted(self.sites)], "version": self.version}


@dataclass(frozen=True)
class _PodRecord:
    node: str | None
    requests: tuple[tuple[str, int], ...]
    donor_site: str | None = None
    user: str | None = None
    groups: tuple[str, ...] = field(default_factory=tuple)


class Inventory:
    """Incremental GPU inventory. Feed it watch events; read it with ``snapshot()``."""

    def __init__(
        self,
        resource_names: Iterable[str] = DEFAULT_RESOURCE_NAMES,
        resource_prefixes: Iterable[str] = DEFAULT_RESOURCE_PREFIXES,
    ) -> None:
        self.resource_names = frozenset(resource_names)
        self.resource_prefixes = tuple(resource_prefixes)
        self._nodes: Map = Map()
        self._sites: Map = Map()
        self._buckets: Map = Map()
        self._usage: Map = Map()
        self._pods: dict[str, _PodRecord] = {}
        self._version = 0

    # ---- what counts -------------------------------------------------------------------
    def tracks(self, resource: str) -> bool:
        return resource in self.resource_names or resource.startswith(self.resource_prefixes)

    def _gpu_quantities(self, quantities: Mapping[str, Any] | None) -> dict[str, int]:
        out: dict[str, int] = {}
        for resource, value in (quantities or {}).items():
            if self.tracks(resource):
                try:
                    out[resource] = parse_count(value)
                except ValueError:
                    continue  # a malformed quantity on someone else's object must not stop the watch
        return out

    def pod_requests(self, pod: Mapping[str, Any]) -> dict[str, int]:
        """GPU units a pod holds, as kube-scheduler counts them.

        Extended resources default their request to the limit; init containers run one at a
        time, so the pod needs the max of their largest and the sum of the app containers.
        """
        spec = pod.get("spec") or {}
        total: dict[str, int] = {}
        for container in spec.get("containers") or []:
            for resource, value in self._container_requests(container).items():
                total[resource] = total.get(resource, 0) + value
        for container in spec.get("initContainers") or []:
            for resource, value in self._container_requests(container).items():
                total[resource] = max(total.get(resource, 0), value)
        return {r: v for r, v in total.items() if v > 0}

    def _container_requests(self, container: Mapping[str, Any]) -> dict[str, int]:
        resources = container.get("resources") or {}
        limits = self._gpu_quantities(resources.get("limits"))
        requests = self._gpu_quantities(resources.get("requests"))
        return {**limits, **requests}

    # ---- node events -------------------------------------------------------------------
    def apply_node_event(self, event_type: str, node: Mapping[str, Any]) -> None:
        name = (node.get("metadata") or {}).get("name")
        if not name:
            return
        old = self._nodes.get(name)
        if event_type == "DELETED":
            if old is None:
                return
            new = replace(old, present=False, ready=False, eligible=False, allocatable=EMPTY)
        else:
            cluster_id = liqo.remote_cluster_id(node)
            site = cluster_id or keys.ORIGIN_SITE
            ready = node_is_ready(node)
            allocatable = Map(self._gpu_quantities((node.get("status") or {}).get("allocatable")))
            requested = old.requested if old is not None else EMPTY
            new = NodeCapacity(
                name=name,
                site=site,
                cluster_id=cluster_id,
                present=True,
                ready=ready,
                eligible=ready and _accepts_new_pods(node),
                allocatable=allocatable,
                requested=requested,
            )
            if old is not None and old.site != new.site and not old.present:
                # pods arrived before their node: their requests were parked under a guessed site
                old = replace(old, site=new.site, cluster_id=new.cluster_id)
        self._replace_node(old, new)

    # ---- pod events --------------------------------------------------------------------
    def apply_pod_event(self, event_type: str, pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        old = self._pods.get(key)
        new = None if event_type == "DELETED" else self._pod_record(pod)
        if new is not None and new.node is None and not new.donor_site:
            new = None  # unbound and not placed by us: holds nothing yet
        if old == new:
            return
        if old is not None:
            self._account_pod(old, -1)
            del self._pods[key]
        if new is not None:
            self._pods[key] = new
            self._account_pod(new, +1)
        self._version += 1

    def _pod_record(self, pod: Mapping[str, Any]) -> _PodRecord | None:
        status = pod.get("status") or {}
        if status.get("phase") in TERMINAL_PHASES:
            return None
        requests = self.pod_requests(pod)
        if not requests:
            return None
        meta = pod.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        labels = meta.get("labels") or {}
        site = labels.get(keys.SITE_LABEL)
        donor_site = site if site and site != keys.ORIGIN_SITE else None
        groups: tuple[str, ...] = ()
        raw_groups = annotations.get(keys.GROUPS_ANNOTATION)
        if raw_groups:
            try:
                parsed = json.loads(raw_groups)
                groups = tuple(sorted(str(g) for g in parsed)) if isinstance(parsed, list) else ()
            except ValueError:
                groups = ()
        return _PodRecord(
            node=(pod.get("spec") or {}).get("nodeName") or None,
            requests=tuple(sorted(requests.items())),
            donor_site=donor_site,
            user=annotations.get(keys.USER_ANNOTATION),
            groups=groups,
        )

    def _account_pod(self, record: _PodRecord, sign: int) -> None:
        if record.node is not None:
            old = self._nodes.get(record.node)
            if old is None:
                old = NodeCapacity(name=record.node, site=keys.ORIGIN_SITE, cluster_id=None)
                self._nodes = self._nodes.set(record.node, old)
            requested = old.requested
            for resource, value in record.requests:
                updated = requested.get(resource, 0) + sign * value
                requested = requested.set(resource, updated) if updated else requested.delete(resource)
            self._replace_node(old, replace(old, requested=requested))
        if record.donor_site and (record.user or record.groups):
            units = sum(value for _resource, value in record.requests)
            usage = self._usage
            owners = ([("user", record.user)] if record.user else []) + [("group", g) for g in record.groups]
            for owner in owners:
                updated = usage.get(owner, 0) + sign * units
                usage = usage.set(owner, updated) if updated else usage.delete(owner)
            self._usage = usage

    # ---- the one place where node state changes ----------------------------------------
    def _replace_node(self, old: NodeCapacity | None, new: NodeCapacity) -> None:
        """Swap ``old`` for ``new`` and move every aggregate by the difference: O(resources)."""
        buckets = self._buckets
        resources = set(new.allocatable) | (set(old.allocatable) if old is not None else set())
        for resource in resources:
            old_free = old.free(resource) if old is not None else 0
            new_free = new.free(resource)
            if old is not None and old_free == new_free and old.site == new.site:
                continue  # the common pod event touches one resource; leave the others alone
            if old_free > 0:
                buckets = _bucket_discard(buckets, (old.site, resource), old_free, old.name)  # type: ignore[union-attr]
            if new_free > 0:
                buckets = _bucket_add(buckets, (new.site, resource), new_free, new.name)
        self._buckets = buckets
        if old is not None and old.site == new.site:
            self._site_change(old, new)
        else:
            if old is not None:
                self._site_change(old, None)
            self._site_change(None, new)
        if not new.present and not new.requested:
            self._nodes = self._nodes.delete(new.name) if new.name in self._nodes else self._nodes
        else:
            self._nodes = self._nodes.set(new.name, new)
        self._version += 1

    def _site_change(self, old: NodeCapacity | None, new: NodeCapacity | None) -> None:
        """Move one site's aggregates from counting ``old`` to counting ``new`` (same site)."""
        some = new if new is not None else old
        assert some is not None
        site = self._sites.get(some.site) or SiteCapacity(site=some.site, cluster_id=some.cluster_id)
        allocatable, requested, free = site.allocatable, site.requested, site.free
        resources = set()
        for node in (old, new):
            if node is not None and node.eligible:
                resources.update(node.allocatable)
                resources.update(node.requested)
        for resource in resources:
            allocatable = _add(allocatable, resource, _eligible(new, "allocatable", resource) - _eligible(old, "allocatable", resource))
            requested = _add(requested, resource, _eligible(new, "requested", resource) - _eligible(old, "requested", resource))
            free = _add(
                free, resource,
                (new.free(resource) if new is not None else 0) - (old.free(resource) if old is not None else 0),
            )
        present = int(bool(new and new.present)) - int(bool(old and old.present))
        eligible = int(bool(new and new.eligible)) - int(bool(old and old.eligible))
        site = SiteCapacity(
            site=site.site,
            cluster_id=site.cluster_id,
            nodes_present=site.nodes_present + present,
            nodes_eligible=site.nodes_eligible + eligible,
            allocatable=allocatable,
            requested=requested,
            free=free,
        )
        if site.nodes_present == 0 and not site.allocatable and not site.requested:
            self._sites = self._sites.delete(site.site) if site.site in self._sites else self._sites
        else:
            self._sites = self._sites.set(site.site, site)

    # ---- reading -----------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        return Snapshot(
            sites=self._sites,
            nodes=self._nodes,
            buckets=self._buckets,
            donor_usage=self._usage,
            version=self._version,
        )

    def load(self, nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> None:
        """Seed from a list call, through the same path as watch events."""
        for node in nodes:
            self.apply_node_event("ADDED", node)
        for pod in pods:
            self.apply_pod_event("ADDED", pod)


def _eligible(node: NodeCapacity | None, field_name: str, resource: str) -> int:
    """A node's count of ``resource`` as the site aggregates see it (ineligible nodes count 0)."""
    if node is None or not node.eligible:
        return 0
    return getattr(node, field_name).get(resource, 0)


def _add(counts: Map, key: str, delta: int) -> Map:
    if not delta:
        return counts
    updated = counts.get(key, 0) + delta
    return counts.set(key, updated) if updated else counts.delete(key)


def _bucket_add(buckets: Map, key: tuple, free: int, name: str) -> Map:
    levels = buckets.get(key, EMPTY)
    return buckets.set(key, levels.set(free, levels.get(free, EMPTY).set(name, None)))


def _bucket_discard(buckets: Map, key: tuple, free: int, name: str) -> Map:
    levels = buckets.get(key, EMPTY)
    members = levels.get(free)
    if members is None or name not in members:
        return buckets
    members = members.delete(name)
    levels = levels.set(free, members) if len(members) else levels.delete(free)
    return buckets.set(key, levels) if len(levels) else buckets.delete(key)


def node_is_ready(node: Mapping[str, Any]) -> bool:
    """The node's Ready condition is True (a virtual node's reflects its peering)."""
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready":
            return condition.get("status") == "True"
    return False


def _accepts_new_pods(node: Mapping[str, Any]) -> bool:
    spec = node.get("spec") or {}
    if spec.get("unschedulable"):
        return False
    for taint in spec.get("taints") or []:
        if taint.get("effect") in BLOCKING_TAINT_EFFECTS and not liqo.is_virtual_node_taint(taint):
            return False
    return True


def full_recount(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    resource_names: Iterable[str] = DEFAULT_RESOURCE_NAMES,
    resource_prefixes: Iterable[str] = DEFAULT_RESOURCE_PREFIXES,
) -> dict[str, dict[str, dict[str, int]]]:
    """The naive baseline: site -> resource -> {allocatable, requested, free}, from scratch.

    Written independently of the incremental path so that tests can hold one against the other.
    """
    counter = Inventory(resource_names, resource_prefixes)  # only for tracks()/pod_requests()
    node_info: dict[str, tuple[str, bool, dict[str, int]]] = {}
    for node in nodes:
        name = node["metadata"]["name"]
        site = liqo.remote_cluster_id(node) or keys.ORIGIN_SITE
        eligible = node_is_ready(node) and _accepts_new_pods(node)
        node_info[name] = (site, eligible, counter._gpu_quantities((node.get("status") or {}).get("allocatable")))
    used: dict[str, dict[str, int]] = {}
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
            continue
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name:
            continue
        for resource, value in counter.pod_requests(pod).items():
            used.setdefault(node_name, {})
            used[node_name][resource] = used[node_name].get(resource, 0) + value
    result: dict[str, dict[str, dict[str, int]]] = {}
    for name, (site, eligible, allocatable) in node_info.items():
        if not eligible:
            continue
        per_site = result.setdefault(site, {})
        for resource in set(allocatable) | set(used.get(name, {})):
            entry = per_site.setdefault(resource, {"allocatable": 0, "requested": 0, "free": 0})
            alloc = allocatable.get(resource, 0)
            req = used.get(name, {}).get(resource, 0)
            entry["allocatable"] += alloc
            entry["requested"] += req
            entry["free"] += max(0, alloc - req)
    for per_site in result.values():
        for resource in [r for r, entry in per_site.items() if not any(entry.values())]:
            del per_site[resource]
    return result


def summarize(snapshot: Snapshot) -> dict[str, dict[str, dict[str, int]]]:
    """A snapshot in ``full_recount``'s shape, for comparisons."""
    result: dict[str, dict[str, dict[str, int]]] = {}
    for name, site in snapshot.sites.items():
        if not site.nodes_eligible:
            continue
        per_site = result.setdefault(name, {})
        for resource in set(site.allocatable) | set(site.requested):
            per_site[resource] = {
                "allocatable": site.allocatable.get(resource, 0),
                "requested": site.requested.get(resource, 0),
                "free": site.free.get(resource, 0),
            }
    return result
