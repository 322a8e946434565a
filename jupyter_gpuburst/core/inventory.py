"""Free capacity per node and per site, kept current from Node and Pod watch events.

Every resource a pod is placed against is counted: CPU (millicores), memory and ephemeral
storage (bytes), pod slots, and the GPU resources (exact names plus prefixes such as
``nvidia.com/mig-`` for MIG slices). Free means allocatable minus what pods request minus what
in-flight spawns hold (``hold``/``release_hold``): a reservation is counted exactly like a pod,
so the best-fit index never has to look at reservations separately.

Every event costs O(resources) (a handful of small updates; no recount), and ``snapshot()`` is
O(1): the node and site tables are immutable HAMT maps (``immutables.Map``), and each node's
counts and each site's totals are small dicts copied on change and never changed after, so a
snapshot is the current set of references and never changes under its reader, however many
events follow. What a reader sees (``Snapshot``, ``NodeCapacity``, ``SiteCapacity``) is in ``snapshot``.

A *site* is ``"origin"`` (the origin's own nodes) or one Liqo donor, named by its cluster id; a
donor's virtual node carries what the donor grants, so its allocatable is a quota of every resource.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from immutables import Map

from . import fitindex, images, keys, liqo
from .quantities import COMPUTE_RESOURCES, PODS, parse_count, pod_requests, quantities
from .snapshot import _COMPUTE, _ZERO, NO_COUNTS, NodeCapacity, SiteCapacity, Snapshot, Totals, summarize

__all__ = [
    "COMPUTE_RESOURCES",
    "DEFAULT_RESOURCE_NAMES",
    "DEFAULT_RESOURCE_PREFIXES",
    "Inventory",
    "NodeCapacity",
    "SiteCapacity",
    "Snapshot",
    "Totals",
    "full_recount",
    "node_is_ready",
    "parse_count",
    "summarize",
]

DEFAULT_RESOURCE_NAMES: tuple[str, ...] = ("nvidia.com/gpu", "amd.com/gpu")
DEFAULT_RESOURCE_PREFIXES: tuple[str, ...] = ("nvidia.com/mig-",)

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
BLOCKING_TAINT_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
_NO_RESOURCES: Mapping[str, Any] = {}


class _PodRecord(NamedTuple):
    """What one pod (or one reservation) holds, as the inventory counts it."""

    node: str | None
    requests: tuple[tuple[str, int], ...]
    donor_site: str | None = None
    user: str | None = None
    groups: tuple[str, ...] = ()
    gpu_units: int = 0


class Inventory:
    """Incremental capacity inventory. Feed it watch events; read it with ``snapshot()``."""

    def __init__(
        self,
        resource_names: Iterable[str] = DEFAULT_RESOURCE_NAMES,
        resource_prefixes: Iterable[str] = DEFAULT_RESOURCE_PREFIXES,
        pool_namespace: Callable[[str | None], bool] = lambda namespace: False,
    ) -> None:
        self.resource_names = frozenset(resource_names)
        self.resource_prefixes = tuple(resource_prefixes)
        # a pool label is anyone's to set: only in the pools' own namespaces does it free the GPUs
        self.pool_namespace = pool_namespace
        # The node table is written through a mutation of the last snapshot's map: between two
        # snapshots, a node's path in the map is copied once and then changed in place, so the
        # stream of watch events between two decisions does not copy the upper levels of a
        # 50,000-entry map on every event (half the cost of a node update at that size). A
        # snapshot finishes the mutation (O(1)); whatever it returned is never changed again.
        self._nodes = Map().mutate()
        self._sites: Map = Map()
        self._index: Map = Map()
        self._usage: Map = Map()
        # Every node in ``_nodes`` has a slot, a small number the index files it under (bit
        # ``slot`` of a group's bit set, see ``fitindex``). Slots of nodes that left are reused,
        # so the bit sets stay as wide as the largest the cluster has been, not as its history.
        self._slots: dict[str, int] = {}
        self._names: Map = Map()  # slot -> node name; persistent, as snapshots hold it
        self._free_slots: list[int] = []
        self._pods: dict[str, _PodRecord] = {}
        self._holds: dict[str, _PodRecord] = {}
        # identical request vectors share one tuple: 500 000 pods come from a few profiles
        self._shapes: dict[tuple[tuple[str, int], ...], tuple[tuple[tuple[str, int], ...], int]] = {}
        # a container's resources as written (limits, requests) -> its interned shape
        self._by_resources: dict[tuple[Any, ...], tuple[tuple[tuple[str, int], ...], int]] = {}
        self._images = images.NodeImages()
        # image -> bit set of the slots of the nodes that have it, written like ``_nodes``
        self._image_slots = Map().mutate()
        self._version = 0
        # one bound method, so that parse caches keyed by it hit across events
        self._counts = self.counts

    # ---- what counts -------------------------------------------------------------------
    def tracks(self, resource: str) -> bool:
        """``resource`` is a GPU resource this inventory counts (configured names and prefixes)."""
        return resource in self.resource_names or resource.startswith(self.resource_prefixes)

    def counts(self, resource: str) -> bool:
        """``resource`` is counted at all: CPU, memory, ephemeral storage, pods, or a GPU."""
        return resource in _COMPUTE or resource in self.resource_names or resource.startswith(self.resource_prefixes)

    @property
    def version(self) -> int:
        """Grows with every change; equal before and after an event that changed nothing."""
        return self._version

    def pod_resources(self, pod: Mapping[str, Any]) -> dict[str, int]:
        """Everything a pod holds on its node, as kube-scheduler counts it (``quantities``)."""
        return pod_requests(pod.get("spec") or {}, self.counts)

    def pod_requests(self, pod: Mapping[str, Any]) -> dict[str, int]:
        """The GPU units a pod holds (its GPU resources only)."""
        return {r: v for r, v in pod_requests(pod.get("spec") or {}, self.tracks).items() if r != PODS}

    # ---- node events -------------------------------------------------------------------
    def apply_node_event(self, event_type: str, node: Mapping[str, Any]) -> bool:
        """Apply one watch event; True when it changed anything."""
        name = (node.get("metadata") or {}).get("name")
        if not name:
            return False
        old = self._nodes.get(name)
        if event_type == "DELETED":
            if old is None or not old.present:
                return False
            new = old._replace(present=False, ready=False, eligible=False, allocatable=NO_COUNTS)
        else:
            cluster_id = liqo.remote_cluster_id(node)
            ready = node_is_ready(node)
            status = node.get("status") or {}
            allocatable = quantities(status.get("allocatable"), self.counts)
            new = NodeCapacity(
                name=name,
                site=cluster_id or keys.ORIGIN_SITE,
                cluster_id=cluster_id,
                present=True,
                ready=ready,
                eligible=ready and _accepts_new_pods(node),
                allocatable=allocatable,
                requested=old.requested if old is not None else NO_COUNTS,
                reserved=old.reserved if old is not None else NO_COUNTS,
                gpu_resources=tuple(sorted(r for r in allocatable if r not in _COMPUTE)),
                images=self._images.of(status.get("images")),
            )
            if new == old:
                return False  # a heartbeat or a label change: nothing placement reads
            if old is not None and old.site != new.site and not old.present:
                # pods arrived before their node: their requests were parked under a guessed site
                old = old._replace(site=new.site, cluster_id=new.cluster_id)
        self._replace_node(old, new, None)
        if old is None or old.images is not new.images:
            images.file_slot(self._image_slots, self._slots[name], old.images if old is not None else images.NO_IMAGES, new.images)
        return True

    # ---- pod events --------------------------------------------------------------------
    def apply_pod_event(self, event_type: str, pod: Mapping[str, Any]) -> bool:
        """Apply one watch event; True when it changed anything."""
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace', '')}/{meta.get('name', '')}"
        old = self._pods.get(key)
        new = None if event_type == "DELETED" else self._pod_record(pod, meta)
        if old == new:
            return False
        if old is not None:
            self._account(old, -1, reserved=False)
            del self._pods[key]
        if new is not None:
            self._pods[key] = new
            self._account(new, +1, reserved=False)
        self._version += 1
        return True

    def _pod_record(self, pod: Mapping[str, Any], meta: Mapping[str, Any]) -> _PodRecord | None:
        status = pod.get("status")
        if status and status.get("phase") in TERMINAL_PHASES:
            return None
        spec = pod.get("spec") or {}
        node = spec.get("nodeName") or None
        labels = meta.get("labels") or {}
        if keys.POOL_LABEL in labels and self.pool_namespace(meta.get("namespace")):
            return None  # a warm pool's placeholder: real pods preempt it, so its room is free to them
        site = labels.get(keys.SITE_LABEL)
        donor_site = site if site and site != keys.ORIGIN_SITE else None
        if node is None and donor_site is None:
            return None  # unbound and not placed by us: holds nothing yet
        known = self._pod_shape(spec)
        if donor_site is None:
            return tuple.__new__(_PodRecord, (node, known[0], None, None, (), known[1]))
        # only donor GPUs count against the per-user and per-group caps
        annotations = meta.get("annotations") or {}
        user = annotations.get(keys.USER_ANNOTATION)
        groups = _groups(annotations.get(keys.GROUPS_ANNOTATION))
        return _PodRecord(node, known[0], donor_site, user, groups, known[1])

    def _pod_shape(self, spec: Mapping[str, Any]) -> tuple[tuple[tuple[str, int], ...], int]:
        """(request vector, GPU units) of a pod spec, shared by every pod that asks the same.

        The common pod (one container, no init containers, no overhead) is looked up by its
        container's ``resources`` as written, before any parsing: a bind or a status update of
        a pod of a known profile costs one dictionary lookup, not a parse.
        """
        key = None
        containers = spec.get("containers")
        if containers and len(containers) == 1 and not spec.get("initContainers") and not spec.get("overhead"):
            resources = containers[0].get("resources") or _NO_RESOURCES
            limits = resources.get("limits")
            requests = resources.get("requests")
            try:
                key = (tuple(limits.items()) if limits else (), tuple(requests.items()) if requests else ())
                known = self._by_resources.get(key)
            except (TypeError, AttributeError):  # unhashable or malformed: parse without the cache
                key = known = None
            if known is not None:
                return known
        known = self._intern(tuple(sorted(pod_requests(spec, self._counts).items())))
        if key is not None and len(self._by_resources) < 65536:
            self._by_resources[key] = known
        return known

    def _intern(self, shape: tuple[tuple[str, int], ...]) -> tuple[tuple[tuple[str, int], ...], int]:
        known = self._shapes.get(shape)
        if known is None:
            known = (shape, sum(v for r, v in shape if r not in _COMPUTE))
            if len(self._shapes) < 65536:
                self._shapes[shape] = known
        return known

    # ---- reservations ------------------------------------------------------------------
    def hold(
        self,
        key: str,
        node: str,
        requests: Mapping[str, int],
        *,
        donor_site: str | None = None,
        user: str | None = None,
        groups: Iterable[str] = (),
    ) -> None:
        """Count ``requests`` on ``node`` as taken by an in-flight spawn until ``release_hold``."""
        self.release_hold(key)
        shape, units = self._intern(tuple(sorted((r, int(v)) for r, v in requests.items() if v)))
        record = _PodRecord(node, shape, donor_site, user, tuple(sorted(groups)), units)
        self._holds[key] = record
        self._account(record, +1, reserved=True)
        self._version += 1

    def release_hold(self, key: str) -> bool:
        record = self._holds.pop(key, None)
        if record is None:
            return False
        self._account(record, -1, reserved=True)
        self._version += 1
        return True

    def holds(self) -> int:
        return len(self._holds)

    # ---- accounting ----------------------------------------------------------------------
    def _account(self, record: _PodRecord, sign: int, *, reserved: bool) -> None:
        if record.node is not None:
            old = self._nodes.get(record.node)
            if old is None:
                old = NodeCapacity(name=record.node, site=keys.ORIGIN_SITE, cluster_id=None)
                self._add_node(record.node, old)
            self._move(old, record.requests, sign, reserved)
        if record.donor_site and record.gpu_units and (record.user or record.groups):
            usage = self._usage.mutate()
            owners = ([("user", record.user)] if record.user else []) + [("group", g) for g in record.groups]
            for owner in owners:
                updated = usage.get(owner, 0) + sign * record.gpu_units
                if updated:
                    usage[owner] = updated
                else:
                    del usage[owner]
            self._usage = usage.finish()

    def _move(self, old: NodeCapacity, requests: tuple[tuple[str, int], ...], sign: int, reserved: bool) -> None:
        """Add (sign +1) or take away (-1) one pod's or hold's ``requests`` on node ``old``.

        The hot path of every watch event, in one pass over the touched resources: the index
        entry moves only when the node's free GPUs or its CPU/memory grade change, and the pods
        of an ineligible node touch no site totals. A node's ``requested``/``reserved`` and a
        site's ``totals`` are small dicts, copied before each change and never changed once a
        snapshot may hold them: one copy of a handful of entries costs less than a persistent
        map update per resource, and dicts of numbers are invisible to the garbage collector.
        """
        name, site_name, _cluster, _present, _ready, eligible, allocatable, requested, held, gpus, node_images = old
        counts = dict(held if reserved else requested)
        if not eligible:
            for resource, value in requests:
                after = counts.get(resource, 0) + sign * value
                if after:
                    counts[resource] = after
                else:
                    counts.pop(resource, None)
            frees = None
            site = None
        else:
            other = requested if reserved else held
            site = self._sites.get(site_name)
            totals = dict(site[4]) if site is not None else None
            frees = {}
            for resource, value in requests:
                delta = sign * value
                before = counts.get(resource, 0)
                after = before + delta
                if after:
                    counts[resource] = after
                else:
                    counts.pop(resource, None)
                free_before = allocatable.get(resource, 0) - before - other.get(resource, 0)
                free_after = free_before - delta
                frees[resource] = (free_before, free_after)
                if totals is not None:
                    t_alloc, t_req, t_held, t_free = totals.get(resource, _ZERO)
                    t_free += (free_after if free_after > 0 else 0) - (free_before if free_before > 0 else 0)
                    if reserved:
                        t_held += delta
                    else:
                        t_req += delta
                    if t_alloc or t_req or t_held or t_free:
                        totals[resource] = tuple.__new__(Totals, (t_alloc, t_req, t_held, t_free))
                    else:
                        totals.pop(resource, None)
        new_requested, new_held = (requested, counts) if reserved else (counts, held)
        new = tuple.__new__(
            NodeCapacity,
            (name, site_name, _cluster, _present, _ready, eligible, allocatable, new_requested, new_held, gpus, node_images),
        )
        if frees and gpus:
            self._move_in_index(old, gpus, frees)
        if site is not None:
            self._sites = self._sites.set(site_name, tuple.__new__(SiteCapacity, (*site[:4], totals)))
        if not _present and not new_requested and not new_held:
            self._forget_node(name)
        else:
            self._nodes.set(name, new)
        self._version += 1

    def _move_in_index(self, old: NodeCapacity, gpus: tuple[str, ...], frees: dict[str, tuple[int, int]]) -> None:
        """Re-file one node after its free counts in ``frees`` went from [0] to [1]."""
        cpu = frees.get("cpu")
        memory = frees.get("memory")
        if cpu is None and memory is None and not any(g in frees for g in gpus):
            return
        allocatable, requested, held = old[6], old[7], old[8]
        if cpu is None:
            free = allocatable.get("cpu", 0) - requested.get("cpu", 0) - held.get("cpu", 0)
            cpu = (free, free)
        if memory is None:
            free = allocatable.get("memory", 0) - requested.get("memory", 0) - held.get("memory", 0)
            memory = (free, free)
        grade_before = fitindex.grade_key(cpu[0], memory[0])
        grade_after = fitindex.grade_key(cpu[1], memory[1])
        index = self._index
        for resource in gpus:
            known = frees.get(resource)
            if known is None:
                if grade_before == grade_after:
                    continue
                before = after = allocatable.get(resource, 0) - requested.get(resource, 0) - held.get(resource, 0)
            else:
                before, after = known
                if before == after and grade_before == grade_after:
                    continue
            index = fitindex.move(
                index,
                (old[1], resource),
                (before, grade_before) if before > 0 else None,
                (after, grade_after) if after > 0 else None,
                self._slots[old[0]],
            )
        self._index = index

    # ---- the one place where node state changes ----------------------------------------
    def _replace_node(self, old: NodeCapacity | None, new: NodeCapacity, changed: Iterable[tuple[str, int]] | None) -> None:
        """Swap ``old`` for ``new``; move the index and the site totals by the difference.

        ``changed`` names the resources a pod or hold touched (None: any may have changed).
        """
        if old is None:
            self._give_slot(new.name)
        old_entries = _index_entries(old) if old is not None else ()
        new_entries = _index_entries(new)
        if old_entries != new_entries:
            index = self._index
            slot = self._slots[new.name]
            for entry in old_entries:
                if entry not in new_entries:
                    index = fitindex.discard(index, entry[0], entry[1], entry[2], slot)
            for entry in new_entries:
                if entry not in old_entries:
                    index = fitindex.add(index, entry[0], entry[1], entry[2], slot)
            self._index = index
        if changed is not None:
            resources: Iterable[str] = [r for r, _ in changed]
        else:
            resources = set(new.allocatable) | set(new.requested) | set(new.reserved)
            if old is not None:
                resources |= set(old.allocatable) | set(old.requested) | set(old.reserved)
        if old is not None and old.site == new.site:
            self._site_change(old, new, resources)
        else:
            if old is not None:
                self._site_change(old, None, resources)
            self._site_change(None, new, resources)
        if not new.present and not new.requested and not new.reserved:
            if new.name in self._nodes:
                self._forget_node(new.name)
        else:
            self._nodes.set(new.name, new)
        self._version += 1

    def _add_node(self, name: str, node: NodeCapacity) -> None:
        """File a node the inventory did not know, with a slot for the index."""
        self._give_slot(name)
        self._nodes.set(name, node)

    def _give_slot(self, name: str) -> None:
        slot = self._free_slots.pop() if self._free_slots else len(self._slots)
        self._slots[name] = slot
        self._names = self._names.set(slot, name)

    def _forget_node(self, name: str) -> None:
        """Drop a node that is gone and holds nothing (so it is filed nowhere in the index)."""
        images.file_slot(self._image_slots, self._slots[name], self._nodes[name].images, images.NO_IMAGES)
        del self._nodes[name]
        slot = self._slots.pop(name)
        self._names = self._names.delete(slot)
        self._free_slots.append(slot)

    def _site_change(self, old: NodeCapacity | None, new: NodeCapacity | None, resources: Iterable[str]) -> None:
        """Move one site's totals from counting ``old`` to counting ``new`` (same site)."""
        some = new if new is not None else old
        assert some is not None
        site = self._sites.get(some.site) or SiteCapacity(site=some.site, cluster_id=some.cluster_id)
        totals = dict(site.totals)  # copied: a snapshot may hold the current one
        for resource in resources:
            before = _counted(old, resource)
            after = _counted(new, resource)
            if before == after:
                continue
            current = totals.get(resource, _ZERO)
            updated = Totals(
                current[0] + after[0] - before[0],
                current[1] + after[1] - before[1],
                current[2] + after[2] - before[2],
                current[3] + after[3] - before[3],
            )
            if any(updated):
                totals[resource] = updated
            elif resource in totals:
                del totals[resource]
        present = int(bool(new and new.present)) - int(bool(old and old.present))
        eligible = int(bool(new and new.eligible)) - int(bool(old and old.eligible))
        site = site._replace(
            nodes_present=site.nodes_present + present,
            nodes_eligible=site.nodes_eligible + eligible,
            totals=totals,
        )
        if site.nodes_present == 0 and not site.totals:
            if site.site in self._sites:
                self._sites = self._sites.delete(site.site)
        else:
            self._sites = self._sites.set(site.site, site)

    # ---- reading -----------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        nodes = self._nodes.finish()
        self._nodes = nodes.mutate()
        image_slots = self._image_slots.finish()
        self._image_slots = image_slots.mutate()
        return Snapshot(self._sites, nodes, self._index, self._usage, self._version, self._names, image_slots)

    def load(self, nodes: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]]) -> None:
        """Seed from a list call, through the same path as watch events."""
        for node in nodes:
            self.apply_node_event("ADDED", node)
        for pod in pods:
            self.apply_pod_event("ADDED", pod)


def _counted(node: NodeCapacity | None, resource: str) -> tuple[int, int, int, int]:
    """A node's share of one resource in its site's totals (ineligible nodes count nothing)."""
    if node is None or not node.eligible:
        return (0, 0, 0, 0)
    allocatable = node.allocatable.get(resource, 0)
    requested = node.requested.get(resource, 0)
    reserved = node.reserved.get(resource, 0)
    return (allocatable, requested, reserved, max(0, allocatable - requested - reserved))


def _index_entries(node: NodeCapacity) -> tuple[tuple[tuple[str, str], int, int], ...]:
    """Where ``node`` belongs in the best-fit index: one entry per GPU resource it has free."""
    if not node[5] or not node[9]:
        return ()
    allocatable, requested, held = node[6], node[7], node[8]
    entries = []
    grade = None
    for resource in node[9]:
        free = allocatable.get(resource, 0) - requested.get(resource, 0) - held.get(resource, 0)
        if free <= 0:
            continue
        if grade is None:
            cpu = allocatable.get("cpu", 0) - requested.get("cpu", 0) - held.get("cpu", 0)
            memory = allocatable.get("memory", 0) - requested.get("memory", 0) - held.get("memory", 0)
            grade = fitindex.grade_key(cpu, memory)
        entries.append(((node[1], resource), free, grade))
    return tuple(entries)


def _groups(raw: str | None) -> tuple[str, ...]:
    if not raw:
        return ()
    try:
        parsed = json.loads(raw)
    except ValueError:
        return ()
    return tuple(sorted(str(g) for g in parsed)) if isinstance(parsed, list) else ()


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
    *,
    compute: bool = False,
) -> dict[str, dict[str, dict[str, int]]]:
    """The naive baseline: site -> resource -> {allocatable, requested, free}, from scratch.

    GPU resources only unless ``compute`` (then CPU, memory, ephemeral storage and pods too).
    Written independently of the incremental path so that tests can hold one against the other.
    """
    counter = Inventory(resource_names, resource_prefixes)  # only for counts()/tracks()
    wanted = counter.counts if compute else counter.tracks
    node_info: dict[str, tuple[str, bool, dict[str, int]]] = {}
    for node in nodes:
        name = node["metadata"]["name"]
        site = liqo.remote_cluster_id(node) or keys.ORIGIN_SITE
        eligible = node_is_ready(node) and _accepts_new_pods(node)
        node_info[name] = (site, eligible, quantities((node.get("status") or {}).get("allocatable"), wanted))
    used: dict[str, dict[str, int]] = {}
    for pod in pods:
        if (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
            continue
        node_name = (pod.get("spec") or {}).get("nodeName")
        if not node_name:
            continue
        for resource, value in pod_requests(pod.get("spec") or {}, wanted).items():
            if resource == PODS and not compute:
                continue
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
