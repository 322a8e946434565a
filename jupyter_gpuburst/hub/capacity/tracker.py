"""Per-hub-process capacity state: one node watch and one pod watch feeding the inventory.

Every spawn of a hub process shares one ``CapacityTracker`` (per API host). Spawns read a
snapshot; they never list nodes or pods themselves, so 200 concurrent spawns cost the API server
exactly two watches. The tracker also holds the Placer (reservations), the FIFO queue of spawns
waiting for capacity, and what the hub shows about placements. Only pods the hub's spawners own
(``hub.ownership``) are taken for user servers; any other pod only counts as GPUs in use.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import gc
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from kubernetes_asyncio.client.exceptions import ApiException
from traitlets.config import Config

from jupyter_gpuburst.core import heap, keys
from jupyter_gpuburst.core.inventory import Inventory, Snapshot
from jupyter_gpuburst.core.placement import Placement, Placer
from jupyter_gpuburst.hub import accounting, retry
from jupyter_gpuburst.hub.capacity.ownership import PodOwnership
from jupyter_gpuburst.hub.capacity.watch import WatchFeed, object_key
from jupyter_gpuburst.hub.queue.estimate import Estimate, WaitHistory, estimate
from jupyter_gpuburst.hub.settings import GPUBurstSettings, api_settings_from_config, settings_from_config

# the garbage collector's thresholds: CPython's defaults, and the hub's once capacity is loaded
CPYTHON_GC_THRESHOLDS = (700, 10, 10)
HUB_GC_THRESHOLDS = (200, 10, 100)

SERVERNAME_ANNOTATION = "hub.jupyter.org/servername"
USERNAME_ANNOTATION = "hub.jupyter.org/username"


def server_key(user: str, server_name: str = "") -> str:
    """The key one server's reservation, queue entry and placement are kept under."""
    return f"{user}/{server_name or ''}"


def kernel_key(user: str, kernel: str) -> str:
    """The key a GPU kernel's reservation and placement are kept under (never a server's)."""
    return f"{user}/kernel:{kernel}"


def pod_server_key(pod: Mapping[str, Any]) -> str | None:
    """The key of whatever owns ``pod``'s placement: its server, or its GPU kernel."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    user = annotations.get(keys.USER_ANNOTATION) or annotations.get(USERNAME_ANNOTATION)
    if not user:
        return None
    kernel = annotations.get(keys.KERNEL_ANNOTATION)
    if kernel:
        return kernel_key(user, kernel)
    return server_key(user, annotations.get(SERVERNAME_ANNOTATION, ""))


def pod_is_bound(pod: Mapping[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("nodeName"))


class CapacityTracker:
    """Live GPU capacity, reservations and placements for one hub process and API host."""

    _instances: dict[Any, "CapacityTracker"] = {}
    _starting: dict[Any, asyncio.Future] = {}

    def __init__(
        self,
        core_api: Any,
        settings: GPUBurstSettings,
        log: logging.Logger | None = None,
        ownership: PodOwnership | None = None,
    ) -> None:
        self.api = core_api
        self.settings = settings
        self.log = log or logging.getLogger(__name__)
        self.ownership = ownership or PodOwnership()
        self.inventory = Inventory(
            resource_names=settings.gpu_resource_names,
            resource_prefixes=settings.gpu_resource_prefixes,
            pool_namespace=self.ownership.owns_pool_namespace,
        )
        self.placer = Placer(settings.policy(), self.inventory, ttl_s=settings.reservation_ttl_seconds)
        # pods carrying the site label, by namespace/name, whoever made them
        self._labelled: dict[str, dict[str, Any]] = {}
        # those of them that are the hub's own user servers (see ownership)
        self._pods: dict[str, dict[str, Any]] = {}
        # decisions whose pod does not exist yet, by server key
        self._inflight: dict[str, dict[str, Any]] = {}
        self._pod_events: dict[str, asyncio.Event] = {}
        # warm pools' pods (placeholders, pre-started kernels) by pool, then namespace/name: a
        # GPU kernel request looks for a waiting kernel here, not in a list of the whole pool
        self._pool_pods: dict[str, dict[str, dict[str, Any]]] = {}
        self._pool_of: dict[str, str] = {}
        # pods with a pool label in a namespace not (yet) the hub's: GPUs in use, until the hub
        # takes their namespace for its own (a donor's kernel namespace, once the registry runs)
        self._foreign_pool: dict[str, dict[str, Any]] = {}
        # the one namespace whose pods the tracker sees (None: all; see _narrowed_namespace)
        self.pods_namespace: str | None = None
        # set at the next change; made only when someone waits (most events have no waiter)
        self._changed: asyncio.Event | None = None
        self._queue: collections.OrderedDict[str, QueueEntry] = collections.OrderedDict()
        # how long recent requests waited in it, for estimates when no session's end is known
        self.waits = WaitHistory()
        self._feeds: list[WatchFeed] = []
        # GPU-hours accounting (hub.accounting), fed by the same pod events; None when off
        self.accounting: Any = None
        self.ready = False

    # ---- lifecycle ---------------------------------------------------------------------------
    @classmethod
    async def ensure(cls, config: Config | None, log: logging.Logger | None = None, namespace: str | None = None) -> "CapacityTracker":
        """The tracker of this hub process for the API host ``config`` names; started once.

        ``namespace``: one the calling spawner puts its pods in (owned from now on).
        """
        tracker = await cls._ensure(config, log)
        if namespace:
            tracker.own_namespace(namespace)
        return tracker

    @classmethod
    async def _ensure(cls, config: Config | None, log: logging.Logger | None = None) -> "CapacityTracker":
        api = api_settings_from_config(config)
        loop = asyncio.get_running_loop()
        key = (id(loop), api["host"])
        existing = cls._instances.get(key)
        if existing is not None:
            return existing
        pending = cls._starting.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future = loop.create_future()
        cls._starting[key] = future
        try:
            from kubespawner.clients import load_config, shared_client

            load_config(host=api["host"], ssl_ca_cert=api["ssl_ca_cert"], verify_ssl=api["verify_ssl"])
            core_api = shared_client("CoreV1Api")
            retry.install(core_api.api_client, logger=log)
            tracker = cls(core_api, settings_from_config(config), log, PodOwnership.from_config(config))
            tracker.accounting = accounting.from_config(config, tracker.inventory.pod_requests, log, tracker.snapshot)
            await tracker.start()
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark retrieved: concurrent callers get it through shield
            raise
        finally:
            cls._starting.pop(key, None)
        cls._instances[key] = tracker
        future.set_result(tracker)
        return tracker

    @classmethod
    async def forget_all(cls) -> None:
        """Stop every tracker of this process (tests, hub shutdown)."""
        trackers = list(cls._instances.values())
        cls._instances.clear()
        for tracker in trackers:
            await tracker.stop()

    async def start(self) -> None:
        """Start both watches and wait for their first list."""
        nodes = WatchFeed(self.api.list_node, self._on_node_event, kind="nodes", log=self.log)
        pods = WatchFeed(self.api.list_pod_for_all_namespaces, self._on_pod_event, kind="pods", log=self.log)
        self._feeds = [nodes, pods]
        # nodes first: pods bound to a node are then counted on the right site at once
        await nodes.start()
        try:
            await pods.start()
        except ApiException as exc:
            namespace = self._narrowed_namespace(exc)
            if namespace is None:
                raise
            pods = WatchFeed(functools.partial(self.api.list_namespaced_pod, namespace), self._on_pod_event, kind="pods", log=self.log)
            self._feeds = [nodes, pods]
            self.pods_namespace = namespace
            await pods.start()
        self.loaded()
        if self.accounting is not None:
            self.accounting.ledger.loaded()
            self.accounting.ledger.start()
        self.ready = True

    def loaded(self) -> None:
        """The first lists are in: move what they built out of the garbage collector's way.

        The inventory of a large cluster is hundreds of thousands of small objects (persistent
        map nodes, pod records) that live as long as the hub. CPython's cyclic collector walks
        every tracked object on each full collection, so with them in the heap an unlucky watch
        event or placement decision waits for a walk over the whole inventory (200 ms at 50,000
        pods). ``gc.freeze()`` moves every object alive now into the permanent generation, which
        collections skip; the collector stays on for everything allocated later. What the
        inventory frees later (a replaced map node, a deleted pod's record) is acyclic and freed
        by reference counting as before, so nothing frozen leaks when it is replaced.

        The collector's thresholds move too, unless the hub's operator set their own: the
        youngest generation is collected after 200 net allocations instead of 700, so each young
        collection (its pause lands inside whichever event or placement decision triggered it)
        walks a third as many objects and stays under a millisecond; and a full collection is
        considered after 100 collections of the middle generation instead of 10. With the
        inventory frozen a full collection walks only what the hub made since, but that is still
        every pod object the tracker keeps for the hub's own servers and every reservation
        (tens of milliseconds with 2,000 of each): it now comes ten times less often. The total
        time spent collecting stays about the same; ``gpuburst bench placement`` prints the
        pauses per generation and what one full collection costs.

        Once per process: a hub has one tracker per API server, and freezing again for a
        second one would also freeze whatever else the process holds at that moment.
        """
        if not heap.freeze_once():
            return
        if gc.get_threshold() == CPYTHON_GC_THRESHOLDS:
            gc.set_threshold(*HUB_GC_THRESHOLDS)

    def _narrowed_namespace(self, exc: ApiException) -> str | None:
        """The one namespace to count pods in when the hub may not read pods cluster-wide.

        An admin who binds the hub a namespaced Role instead of the pod-reading ClusterRole
        (docs/security.md) gets accounting of that namespace only: GPUs that other namespaces'
        pods hold on the same nodes are not seen, and a spawn placed there waits Pending
        until the redirect moves it.
        """
        namespaces = sorted(self.ownership.namespaces)
        if exc.status != 403 or len(namespaces) != 1 or self.ownership.namespace_patterns:
            return None
        self.log.warning(
            "The hub may not list pods cluster-wide (403); counting GPUs of pods in namespace %s only. "
            "GPUs used by pods of other namespaces are not seen.",
            namespaces[0],
        )
        return namespaces[0]

    async def stop(self) -> None:
        self.ready = False
        for feed in self._feeds:
            await feed.stop()
        self._feeds = []
        if self.accounting is not None:
            await self.accounting.ledger.stop()

    # ---- events ------------------------------------------------------------------------------
    def _notify(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    def _on_node_event(self, event_type: str, node: Mapping[str, Any]) -> None:
        self.inventory.apply_node_event(event_type, node)
        self._notify()

    def _on_pod_event(self, event_type: str, pod: Mapping[str, Any]) -> None:
        self.inventory.apply_pod_event(event_type, pod)
        key = object_key(pod)
        labels = (pod.get("metadata") or {}).get("labels") or {}
        if event_type == "DELETED" or keys.SITE_LABEL not in labels:
            # the hub's own pods are a subset of the labelled ones
            if self._labelled.pop(key, None) is not None:
                self._pods.pop(key, None)
        else:
            self._labelled[key] = kept = _kept(pod)
            self._classify(key, kept)
        pool_pod = self.ownership.is_pool_pod(pod)
        self._keep_pool_pod(event_type, key, labels.get(keys.POOL_LABEL) if pool_pod else None, pod)
        if event_type != "DELETED" and keys.POOL_LABEL in labels and not pool_pod:
            self._foreign_pool[key] = _kept(pod)
        else:
            self._foreign_pool.pop(key, None)
        if self.accounting is not None:
            own = self._pods.get(key)
            if event_type == "DELETED":
                # the pod as the API server last had it: when it went is in it (deletionTimestamp,
                # its containers' end), for a ledger that hears of it late; read, never kept
                own = pod
            elif own is None and self.ownership.is_pool_pod(pod):
                own = _kept(pod)  # a warm pool's placeholder: the ledger counts it as the pool's
            self.accounting.ledger.pod_event(event_type, key, own)
        if self._pod_events:
            event = self._pod_events.get(key)
            if event is not None:
                event.set()
        if self._changed is not None:
            self._notify()

    def _keep_pool_pod(self, event_type: str, key: str, pool: str | None, pod: Mapping[str, Any]) -> None:
        pool = None if event_type == "DELETED" else pool
        previous = self._pool_of.pop(key, None)
        if previous is not None and previous != pool:
            members = self._pool_pods[previous]
            members.pop(key, None)
            if not members:
                del self._pool_pods[previous]
        if pool:
            self._pool_pods.setdefault(pool, {})[key] = _kept(pod)
            self._pool_of[key] = pool

    def _classify(self, key: str, pod: dict[str, Any]) -> None:
        if not self.ownership.owns(pod):
            # someone else's pod: its GPUs are counted (inventory), it is nobody's server
            self._pods.pop(key, None)
            return
        self._pods[key] = pod
        if pod_is_bound(pod):
            # the inventory counts a bound pod itself; holding its reservation too would
            # count the same GPUs twice
            owner = pod_server_key(pod)
            if owner is not None:
                self.placer.release(owner)
                self._inflight.pop(owner, None)

    def own_namespace(self, namespace: str) -> None:
        """Take the user-server pods (and warm pools' pods) of ``namespace`` for the hub's own from now on."""
        if self.ownership.add_namespace(namespace):
            for key, pod in self._labelled.items():
                if pod.get("metadata", {}).get("namespace") == namespace:
                    self._classify(key, pod)
                    if self.accounting is not None:
                        self.accounting.ledger.pod_event("MODIFIED", key, self._pods.get(key))
            # pool pods seen there before: their room is free and their time the pool's from now
            for key, pod in [(k, p) for k, p in self._foreign_pool.items() if p["metadata"].get("namespace") == namespace]:
                del self._foreign_pool[key]
                self.inventory.apply_pod_event("MODIFIED", pod)
                self._keep_pool_pod("MODIFIED", key, pod["metadata"]["labels"][keys.POOL_LABEL], pod)
                if self.accounting is not None:
                    self.accounting.ledger.pod_event("MODIFIED", key, pod)
            self._notify()

    # ---- reading -----------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        return self.inventory.snapshot()

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The latest state of a pod this product placed (no API call): metadata and status
        whole, of the spec its node and its containers' resources only (``_kept``)."""
        return self._pods.get(f"{namespace}/{name}")

    def pool_pods(self, pool: str) -> list[dict[str, Any]]:
        """The pods of warm pool ``pool`` (its POOL_LABEL), as last seen (no API call); only
        those of ``pods_namespace`` where the tracker sees no other."""
        return list(self._pool_pods.get(pool, {}).values())

    def placed_pods(self) -> list[dict[str, Any]]:
        """Every pod this product placed, as last seen (no API call)."""
        return list(self._pods.values())

    async def wait_pod_change(self, namespace: str, name: str, timeout: float) -> None:
        """Return when a watch event for that pod arrives, or after ``timeout`` seconds."""
        key = f"{namespace}/{name}"
        event = self._pod_events.setdefault(key, asyncio.Event())
        try:
            await _wait_event(event, timeout)
        finally:
            event.clear()
            self._pod_events.pop(key, None)

    async def wait_change(self, timeout: float) -> None:
        """Return at the next node or pod event, or after ``timeout`` seconds."""
        if self._changed is None:
            self._changed = asyncio.Event()
        await _wait_event(self._changed, timeout)

    # ---- placements shown to the hub -----------------------------------------------------------
    def note_decision(self, key: str, placement: Placement, attempts: int) -> None:
        self._inflight[key] = {**placement.as_dict(), "attempts": attempts, "state": "pending"}

    def forget_decision(self, key: str) -> None:
        self._inflight.pop(key, None)
        self.placer.release(key)

    def placements(self) -> dict[str, dict[str, Any]]:
        """Server key -> placement and state, for running and pending servers this hub knows."""
        out = {key: dict(value) for key, value in self._inflight.items()}
        for pod in self._pods.values():
            owner = pod_server_key(pod)
            if owner is None:
                continue
            meta = pod.get("metadata") or {}
            labels = meta.get("labels") or {}
            annotations = meta.get("annotations") or {}
            phase = (pod.get("status") or {}).get("phase")
            resource, count = next(iter(sorted(self.inventory.pod_requests(pod).items())), (None, None))
            out[owner] = {
                "site": labels.get(keys.SITE_LABEL),
                "cluster_id": labels.get(keys.CLUSTER_LABEL),
                "node": (pod.get("spec") or {}).get("nodeName"),
                "resource": resource,
                "count": count,
                "reason": annotations.get(keys.REASON_ANNOTATION, ""),
                "attempts": _int(annotations.get(keys.ATTEMPTS_ANNOTATION), 1),
                "pod": meta.get("name"),
                "namespace": meta.get("namespace"),
                "state": "running" if phase == "Running" and "deletionTimestamp" not in meta else "pending",
            }
        return out

    # ---- the fair queue ------------------------------------------------------------------------
    def enqueue(self, key: str, resource: str | None = None, count: int = 1, first: bool = False) -> int:
        """Put ``key`` (asking ``count`` GPUs of ``resource``) at the end of the line, once;
        ``first`` (a student of a lab on now, hub/queue/classes.py): behind the others who go
        first, ahead of everyone else."""
        if key not in self._queue:
            entries = list(self._queue.items())
            at = sum(1 for _, e in entries if e.first) if first else len(entries)
            entry = QueueEntry(time.monotonic(), at + 1, resource, count, first)
            self._queue = collections.OrderedDict([*entries[:at], (key, entry), *entries[at:]])
        return self.queue_position(key)

    def dequeue(self, key: str, placed: bool = False) -> None:
        """Take ``key`` out of the line; ``placed``: it leaves with a placement (its wait counts
        for later estimates), not cancelled, refused or timed out."""
        entry = self._queue.pop(key, None)
        if entry is None:
            return
        if placed:
            now = time.monotonic()
            self.waits.record(now, now - entry.since, entry.position)
        self._notify()  # the next in line may now try

    def queue_position(self, key: str) -> int:
        """1-based position of ``key`` in the queue, 0 when not queued."""
        for position, queued in enumerate(self._queue, start=1):
            if queued == key:
                return position
        return 0

    def queue_estimate(self, key: str, ends: Sequence[tuple[float, int]] = ()) -> Estimate:
        """How long ``key`` will still wait; ``ends``: (seconds until it ends, GPUs it holds) of the
        running sessions of its GPU type whose end is known (``hub.queue.ends``)."""
        entry = self._queue.get(key)
        position = self.queue_position(key)
        if entry is None or not position:
            return estimate(0, 0, (), None)
        needed = 0
        for queued in list(self._queue.values())[:position]:
            if queued.resource == entry.resource:
                needed += max(1, queued.count)
        return estimate(position, needed, ends, self.waits.per_place(time.monotonic()))

    def queued_resource(self, key: str) -> str | None:
        entry = self._queue.get(key)
        return entry.resource if entry is not None else None

    @property
    def queue_length(self) -> int:
        return len(self._queue)


class QueueEntry(NamedTuple):
    """One request in the line: since when (monotonic), its place when it joined, what it asks."""

    since: float
    position: int
    resource: str | None
    count: int
    first: bool = False  # a student of a lab on now


def _kept(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What the tracker keeps of a pod it placed: metadata and status whole, of the spec only
    the node and what its containers request (``Inventory.pod_requests`` reads those).

    The hub holds one of these per server for as long as the server runs. The rest of the spec
    (environment, mounts, volumes, tolerations, ...) is a few dozen more lists and dicts per
    pod that nobody reads from here, and that every full garbage collection would walk: 2,000
    servers' whole pods are some 70,000 objects. A spawner that needs the whole pod reads it
    from the API server.
    """
    spec = pod.get("spec") or {}
    kept_spec: dict[str, Any] = {}
    if "nodeName" in spec:
        kept_spec["nodeName"] = spec["nodeName"]
    for field in ("containers", "initContainers"):
        containers = spec.get(field)
        if containers:
            kept_spec[field] = [{k: c[k] for k in ("name", "resources", "restartPolicy") if k in c} for c in containers]
    if spec.get("overhead"):
        kept_spec["overhead"] = spec["overhead"]
    return {**pod, "spec": kept_spec}


async def _wait_event(event: asyncio.Event, timeout: float) -> None:
    """Wait for ``event``, at most ``timeout`` seconds.

    Not ``asyncio.wait_for``: on Python 3.11 it swallows a cancellation that arrives as the
    event fires, and a cancelled pod watcher then never ends (its spawn hangs until
    ``start_timeout``).
    """
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({waiter}, timeout=timeout)
    finally:
        waiter.cancel()


def _int(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default
