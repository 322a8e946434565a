"""Keeps each warm pool at its size: creates placeholders where the site has room, removes them
where a real spawn needs the room or the site ran short, and counts what they hold.

It never delays a real spawn: placeholders are counted as free by placement (``core.inventory``),
so a spawn is placed on their room and its pod preempts them (their priority is below every
user pod, grace period 0); and when a spawn's reservation lands on a node whose placeholders
fill it, they are removed at once, before its pod even reaches the scheduler. A placeholder the
scheduler could not place within ``pending_seconds`` is removed too: its site ran short. One
list of the pools' pods per pass, and a pass whenever capacity changes (at most every
``interval_seconds``). A pool with a schedule is kept at its size only within its windows, and
emptied outside them (a pre-started kernel being adopted stays: it is a student's now).

After an upgrade the pods an older hub left are drained and replaced, never adopted: those of
another release or image (``stale``), and those of a pool that neither the admin's settings
nor, once the lab book is read, a booking asks for (a restarted hub's first pass may come before
the book is read: a lab's warm pods drained then would be remade, their images pulled again);
with no pool left at all, a hub drains those in the pools' namespace once at its start. A
kernel a student adopted is no pool's pod any more (adoption took the pool's labels off): it is
never listed here, and a delete's preconditions leave one adopted since the list.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import inspect
import json
import logging
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio.client import V1DeleteOptions, V1Preconditions
from kubernetes_asyncio.client.exceptions import ApiException

from jupyter_gpuburst.core import keys
from jupyter_gpuburst.core.snapshot import is_gpu_resource
from jupyter_gpuburst.hub import metrics
from jupyter_gpuburst.hub.kernels import prestarted
from jupyter_gpuburst.hub.kernels.donorspace import DonorNamespaces
from jupyter_gpuburst.hub.pools import manifests, schedule, stale
from jupyter_gpuburst.hub.pools.settings import KERNELS, Pool, Shape, WarmPools

TERMINAL = frozenset({"Succeeded", "Failed"})


@dataclass
class PoolState:
    """What the capacity page and metrics show of one pool."""

    pool: Pool
    target: int = 0  # the pool's size now: its count, or 0 outside its schedule
    when: str = ""  # its schedule's state: "on until 09:15", "off until Mon 08:30"
    ready: int = 0  # running (a kernel: imports done): the room is held, the image is on the node
    pending: int = 0  # not placed yet, pulling the image (or a kernel importing)
    gpus: dict[str, int] = field(default_factory=dict)  # GPU units the bound placeholders hold
    gpu_seconds: float = 0.0  # GPU-seconds held since the hub started (the pool's, nobody's)
    created: int = 0
    removed: int = 0
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "site": self.pool.site,
            "profile": self.pool.profile,
            "kind": self.pool.kind,  # placeholders, or pre-started GPU kernels
            "target": self.target,
            "count": self.pool.count,
            "schedule": [w.text for w in self.pool.schedule],
            "when": self.when,
            "ready": self.ready,
            "pending": self.pending,
            "gpus": dict(self.gpus),
            "gpu_hours": round(self.gpu_seconds / 3600, 4),
            "note": self.note,
        }


class PoolController:
    """The warm pools of one hub, on the origin's API (Liqo carries donor placeholders)."""

    def __init__(
        self,
        settings: WarmPools,
        shapes: Mapping[str, Shape],
        namespace: str,
        core_api: Any,
        scheduling_api: Any,
        tracker: Any,
        log: logging.Logger | None = None,
        clock: Callable[[], float] = time.monotonic,
        offloader: Any = None,
        kernel_pods: Mapping[str, Callable[[], Any]] | None = None,
        wall_clock: Callable[[], dt.datetime] | None = None,
        booked: Callable[[dt.datetime], Iterable[Pool] | None] | None = None,
        kernel_pod_for: Callable[[Pool], Callable[[], Any] | None] | None = None,
    ):
        # pools that teachers' lab bookings ask for now (hub/labs), on top of the admin's; None
        # while the bookings are not read yet
        self.booked = booked
        self._bookings_read = booked is None
        self.offloader = offloader  # sites.offloading.NamespaceOffloader: donor placeholders need it
        self.settings = settings
        self.shapes = dict(shapes)
        # a pre-started kernel pool's pod, by pool name (hub/kernels/prestarted): a new one per call
        self.kernel_pods = dict(kernel_pods or {})
        # and for a kernel pool no one configured: a booked lab's in kernel mode (None: no such profile)
        self.kernel_pod_for = kernel_pod_for
        self.namespace = namespace
        self.core = core_api
        self.scheduling = scheduling_api
        self.tracker = tracker
        self.log = log or logging.getLogger(__name__)
        # a donor's pre-started kernels wait in that donor's kernel namespace, made and offloaded here
        self.donor_namespaces = DonorNamespaces(core_api, offloader, self.log) if offloader is not None else None
        self.clock = clock
        # the schedules' clock: the time of day in the pools' time zone
        self.wall_clock = wall_clock or (lambda: dt.datetime.now(settings.tz()))
        self.states = {p.name: PoolState(p) for p in settings.pool_list()}
        self._static = frozenset(self.states)
        self._apply_schedules()
        for state in self.states.values():
            if self._builder(state.pool) is None:
                state.note = f"no profile {state.pool.profile!r} in the spawner's profile_list"
        self._first_seen: dict[str, float] = {}
        self._last_pass: float | None = None
        self._class_ready = False
        self._swept = False
        self._task: asyncio.Task | None = None
        self._images: dict[str, str] = {}  # the image each pool's pods are made for, by pool name

    # ---- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="gpuburst-warm-pools")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        while True:
            started = self.clock()
            try:
                await self.reconcile()
            except asyncio.CancelledError:
                raise
            except Exception:  # the next pass tries again; a pool must not stop the hub
                self.log.exception("warm pools: pass failed")
            left = self.settings.interval_seconds - (self.clock() - started)
            # a change of capacity (a reservation, a pod bound or gone) starts the next pass sooner
            await self.tracker.wait_change(max(left, 0.2))
            await asyncio.sleep(0.2)  # a burst of changes costs one pass

    # ---- one pass --------------------------------------------------------------------------
    async def reconcile(self) -> None:
        self._apply_schedules()
        if not self.states:
            # only bookings drive this hub's pools, and none has asked for one yet
            await self._sweep()
            return
        await self._ensure_priority_class()
        pods = await self._list()
        now = self.clock()
        by_pool: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for pod in pods:
            by_pool[pod["metadata"]["labels"].get(keys.POOL_LABEL, "")].append(pod)
            self._first_seen.setdefault(pod["metadata"]["uid"], now)
        live = {p["metadata"]["uid"] for p in pods}
        self._first_seen = {uid: t for uid, t in self._first_seen.items() if uid in live}
        elapsed = now - self._last_pass if self._last_pass is not None else 0.0
        self._last_pass = now
        for name, state in self.states.items():
            # what they held since the last pass, those removed in this one included
            self._count(state, by_pool.get(name, []), elapsed)
        removed = await self._drain(by_pool)
        pods = [p for p in pods if p["metadata"]["uid"] not in removed]
        removed |= await self._make_room(pods)
        pods = [p for p in pods if p["metadata"]["uid"] not in removed]
        snapshot = self.tracker.snapshot()
        held = _held_by_node(pods, self.tracker.inventory.pod_resources)
        for name, state in self.states.items():
            mine = [p for p in by_pool.get(name, []) if p["metadata"]["uid"] not in removed]
            build = self._builder(state.pool)
            if build is None:
                continue
            mine, short = await self._shrink(state, mine, now)
            missing = state.target - len(mine)
            if missing <= 0:
                state.note = ""
                continue
            namespace = self._namespace_of(state.pool)
            if state.pool.site != keys.ORIGIN_SITE and self.offloader is not None:
                await self._offload(namespace, state.pool.site)
            manifest = await _built(build)
            demand = self.tracker.inventory.pod_resources(manifest)
            room = _room(snapshot, state.pool.site, demand, held)
            for _ in range(min(missing, room)):
                try:
                    await self.core.create_namespaced_pod(namespace, manifest)
                except ApiException as exc:
                    state.note = f"cannot create placeholders: {exc.status} {exc.reason}"
                    self.log.warning("warm pool %s: creating a placeholder failed: %s %s", name, exc.status, exc.reason)
                    break
                state.created += 1
                manifest = await _built(build)  # a kernel pool's pods each have a name (and a Secret) of their own
                # the next placeholder of this pass must not count the same room
                _hold_somewhere(snapshot, state.pool.site, demand, held)
            else:
                if short:
                    state.note = f"{state.pool.site} ran short: a placeholder could not be placed"
                else:
                    state.note = "" if room >= missing else f"{state.pool.site} has room for {room} more now"

    def _apply_schedules(self) -> None:
        today = self.wall_clock()
        for name, state in self.states.items():
            static = name in self._static
            state.target = state.pool.count if static and schedule.is_open(state.pool.schedule, today) else 0
            state.when = schedule.describe(state.pool.schedule, today) if static else ""
        booked = self.booked(today) if self.booked is not None else ()
        self._bookings_read = booked is not None
        for pool in booked or ():
            state = self.states.setdefault(pool.name, PoolState(pool))
            state.target += pool.count
            state.when = state.when or "booked for a lab"
            if self._builder(pool) is None:
                what = "GPU kernel profile" if pool.kind == KERNELS else "profile"
                state.note = f"no {what} {pool.profile!r} to keep warm for a lab"

    def _namespace_of(self, pool: Pool) -> str:
        """Where ``pool``'s pods are: a donor's pre-started kernels in that donor's kernel
        namespace (``prestarted.pool_namespace``: a kernel pool's builder makes them there),
        every other pod in the pools' namespace."""
        return prestarted.pool_namespace(self.namespace, pool.site) if pool.kind == KERNELS else self.namespace

    def _namespaces(self) -> list[str]:
        return sorted({self.namespace} | {self._namespace_of(state.pool) for state in self.states.values()})

    async def _sweep(self) -> None:
        """No pool runs here (the admin's pools turned off, no lab on): drain what an earlier
        hub's pools left in the pools' namespace, once, as the pods of a pool no longer
        configured are drained beside running pools. A donor's kernel namespace is left: with no
        kernel pool the hub may have no right to read it. Only once the bookings are read: a
        running lab's pool comes back with them."""
        if self._swept or not self._bookings_read:
            return
        try:
            pods = await self._list()
        except ApiException as exc:  # a hub with no pools must not fail a pass every few seconds
            self.log.warning("warm pools: cannot list what earlier pools left in %s: %s %s", self.namespace, exc.status, exc.reason)
            self._swept = True
            return
        by_pool: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for pod in pods:
            by_pool[pod["metadata"]["labels"].get(keys.POOL_LABEL, "")].append(pod)
        await self._drain(by_pool)
        self._swept = True

    async def _list(self) -> list[dict[str, Any]]:
        """The pools' pods, in the pools' namespace and each donor kernel namespace a pool uses.
        A donor's namespace the hub may not read yet (its donor-kernels.yaml not applied) is
        said, and keeps no other pool from its pass; the pools' own namespace failing fails it."""
        pods: list[dict[str, Any]] = []
        for namespace in self._namespaces():
            try:
                listed = await self.core.list_namespaced_pod(namespace, label_selector=keys.POOL_LABEL, _preload_content=False)
            except ApiException as exc:
                if namespace == self.namespace:
                    raise
                self.log.warning("warm pools: cannot list the pods of %s: %s %s", namespace, exc.status, exc.reason)
                continue
            pods += [p for p in (await _json(listed)).get("items") or [] if _alive(p)]
        return pods

    async def _offload(self, namespace: str, site: str) -> None:
        """Let Liqo carry pods of ``namespace`` to donor ``site``: the pools' namespace (to every
        donor, as the servers'), or a donor's kernel namespace, made if missing, to that donor alone."""
        if namespace == self.namespace:
            await self.offloader.ensure(self.namespace)  # Liqo offloads only such namespaces
            return
        await self.donor_namespaces.ensure(namespace, site)
        self.tracker.own_namespace(namespace)  # the room its pods hold is the pool's, as in the pools' namespace

    def _builder(self, pool: Pool) -> Callable[[], Any] | None:
        """What makes one pod of ``pool`` (a kernel pool's may be async: the admin's hook); None
        when its profile is unknown."""
        if pool.kind == KERNELS:
            if pool.name not in self.kernel_pods and self.kernel_pod_for is not None:
                self.kernel_pods[pool.name] = self.kernel_pod_for(pool)
            return self.kernel_pods.get(pool.name)
        shape = self.shapes.get(pool.profile)
        if shape is None:
            return None
        return lambda: manifests.placeholder_pod(pool, shape, self.namespace, self.settings.priority_class)

    async def _drain(self, by_pool: Mapping[str, list[dict[str, Any]]]) -> set[str]:
        """Remove the pods no pool of this hub would make now (another release's or image's, or of
        a pool no longer configured), which their pool then replaces: their uids."""
        removed: set[str] = set()
        for name, pods in by_pool.items():
            state = self.states.get(name)
            if state is None and not self._bookings_read:
                continue  # a booked pool's, maybe: a restarted hub's first pass may come before its bookings are read
            image = await self._image(state.pool) if state is not None else None
            if state is not None and image is None:
                continue  # an unknown profile: nothing to compare with (its note says why)
            for pod in pods:
                why = stale.stale(pod, image) if image is not None else "its pool is no longer configured"
                if why is None or prestarted.claimed(pod["metadata"]["namespace"], pod["metadata"]["name"]):
                    continue
                self.log.info("warm pool %s: draining %s (%s)", name, pod["metadata"]["name"], why)
                if await self._delete(pod):
                    removed.add(pod["metadata"]["uid"])
                    if state is not None:
                        state.removed += 1
        return removed

    async def _image(self, pool: Pool) -> str | None:
        """The image ``pool``'s pods are made for now (a kernel pool's, as its builder makes it)."""
        if pool.name not in self._images:
            build = self._builder(pool)
            if build is None:
                return None
            self._images[pool.name] = stale.image_of(await _built(build))
        return self._images[pool.name]

    def _count(self, state: PoolState, pods: list[dict[str, Any]], elapsed: float) -> None:
        """Ready and pending placeholders, and the GPU-seconds the bound ones held since the last pass."""
        state.ready = state.pending = 0
        gpus: Counter[str] = Counter()
        for pod in pods:
            if _ready(pod):
                state.ready += 1
            else:
                state.pending += 1  # not placed yet, or pulling its image
            if (pod.get("spec") or {}).get("nodeName"):
                for resource, units in self.tracker.inventory.pod_requests(pod).items():
                    gpus[resource] += units
        state.gpus = dict(gpus)
        state.gpu_seconds += elapsed * sum(gpus.values())
        # a kernel pool's series is "kernel:<profile>", apart from a placeholder pool of that slug
        profile = state.pool.profile if state.pool.kind != KERNELS else f"kernel:{state.pool.profile}"
        metrics.record_pool(state.pool.site, profile, state.ready, state.pending, elapsed * sum(gpus.values()))

    async def _shrink(self, state: PoolState, pods: list[dict[str, Any]], now: float) -> tuple[list[dict[str, Any]], bool]:
        """Remove placeholders beyond the pool's size (unscheduled ones first) and those the
        scheduler could not place within ``pending_seconds``."""
        pods = sorted(pods, key=lambda p: (bool((p.get("spec") or {}).get("nodeName")), p["metadata"].get("creationTimestamp", "")))
        keep = []
        short = False
        extra = len(pods) - state.target
        for pod in pods:
            unbound = not (pod.get("spec") or {}).get("nodeName")
            stuck = unbound and now - self._first_seen.get(pod["metadata"]["uid"], now) >= self.settings.pending_seconds
            if (extra > 0 or stuck) and not prestarted.claimed(pod["metadata"]["namespace"], pod["metadata"]["name"]):
                if await self._delete(pod):
                    state.removed += 1
                    extra -= 1
                    short = short or stuck
                    continue
            keep.append(pod)
        return keep, short

    async def _make_room(self, pods: list[dict[str, Any]]) -> set[str]:
        """Remove placeholders from nodes where what real pods and in-flight spawns hold leaves
        no room for them: the spawn's pod must not wait for a preemption."""
        snapshot = self.tracker.snapshot()
        on_node: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if node:
                on_node[node].append(pod)
        removed: set[str] = set()
        for node_name, placeholders in on_node.items():
            node = snapshot.nodes.get(node_name)
            if node is None or not node.eligible:
                continue
            need: Counter[str] = Counter()
            # a waiting kernel a GPU kernel is adopting is left out: that request's reservation
            # already counts its room, and counting it twice would remove another waiting kernel
            demands = [
                (p, self.tracker.inventory.pod_resources(p))
                for p in placeholders
                if not prestarted.claimed(p["metadata"]["namespace"], p["metadata"]["name"])
            ]
            for _pod, demand in demands:
                need.update(demand)
            # the newest placeholders go first: the older ones have pulled their image
            demands.sort(key=lambda pd: pd[0]["metadata"].get("creationTimestamp", ""), reverse=True)
            for pod, demand in demands:
                if all(need[r] <= _free(node, r) for r in need):
                    break
                if await self._delete(pod):
                    removed.add(pod["metadata"]["uid"])
                    state = self.states.get(pod["metadata"]["labels"].get(keys.POOL_LABEL, ""))
                    if state is not None:
                        state.removed += 1
                need.subtract(demand)
        return removed

    async def _delete(self, pod: dict[str, Any]) -> bool:
        """Remove ``pod`` as this pass listed it, and nothing else: True when it is gone."""
        meta = pod["metadata"]
        try:
            await self.core.delete_namespaced_pod(meta["name"], meta["namespace"], body=delete_options(pod), grace_period_seconds=0)
        except ApiException as exc:
            if exc.status == 409:
                # someone acted since the list: a request adopted the kernel (its patch changed
                # the pod's resourceVersion) or the name is another pod's now; it is not ours
                self.log.debug("warm pools: %s changed since it was listed; left alone", meta["name"])
                return False
            if exc.status != 404:
                self.log.warning("warm pools: removing %s failed: %s %s", meta["name"], exc.status, exc.reason)
                return False
        return True

    async def _ensure_priority_class(self) -> None:
        if self._class_ready:
            return
        body = manifests.priority_class(self.settings.priority_class, self.settings.priority)
        try:
            await self.scheduling.create_priority_class(body)
        except ApiException as exc:
            if exc.status == 403:
                # the admin applied hub_config/warm-pools.yaml instead of granting the hub this
                self.log.warning(
                    "warm pools: the hub may not create PriorityClass %s (403); it must exist on the origin "
                    "(kubectl apply -f hub_config/warm-pools.yaml)",
                    self.settings.priority_class,
                )
            elif exc.status != 409:
                raise
        self._class_ready = True

    def report(self) -> list[dict[str, Any]]:
        return [s.as_dict() for s in self.states.values()]

    def kernel_pools(self) -> set[tuple[str, str]]:
        """(site, GPU kernel profile) of each pre-started kernel pool kept now."""
        kept = [s.pool for s in list(self.states.values()) if s.pool.kind == KERNELS and s.target > 0]
        return {(pool.site, pool.profile) for pool in kept if self._builder(pool) is not None}


def delete_options(pod: Mapping[str, Any]) -> V1DeleteOptions:
    """Preconditions that make a delete act on the pod as listed: its uid (a pod of the same name
    made since is not it) and, for a waiting kernel, its resourceVersion too: adoption is a patch
    of the same pod, so only the version tells an adopted kernel from a waiting one."""
    meta = pod["metadata"]
    kernel = (meta.get("labels") or {}).get(keys.POOL_KIND_LABEL) == keys.POOL_KIND_KERNEL
    version = meta.get("resourceVersion") if kernel else None
    return V1DeleteOptions(preconditions=V1Preconditions(uid=meta["uid"], resource_version=version))


async def _built(build: Callable[[], Any]) -> dict[str, Any]:
    pod = build()
    return await pod if inspect.isawaitable(pod) else pod


async def _json(response: Any) -> dict[str, Any]:
    return json.loads(await response.read())


def _alive(pod: Mapping[str, Any]) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and (pod.get("status") or {}).get("phase") not in TERMINAL


def _ready(pod: Mapping[str, Any]) -> bool:
    """Running and not said unready: a placeholder once it runs, a pre-started kernel once its
    imports are done (its readiness probe)."""
    status = pod.get("status") or {}
    conditions = status.get("conditions") or []
    return status.get("phase") == "Running" and not any(c.get("type") == "Ready" and c.get("status") != "True" for c in conditions)


def _free(node: Any, resource: str) -> int:
    """What real pods and reservations leave on the node (placeholders are not in ``requested``)."""
    return node.allocatable.get(resource, 0) - node.requested.get(resource, 0) - node.reserved.get(resource, 0)


def _held_by_node(pods: list[dict[str, Any]], resources_of: Callable[[Any], dict[str, int]]) -> dict[str, Counter[str]]:
    held: dict[str, Counter[str]] = defaultdict(Counter)
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            held[node].update(resources_of(pod))
    return held


def _site_nodes(snapshot: Any, site: str) -> list[Any]:
    return sorted((n for n in snapshot.nodes.values() if n.site == site and n.eligible), key=lambda n: n.name)


def _fits_times(node: Any, demand: Mapping[str, int], held: Counter[str]) -> int:
    counts = [(_free(node, r) - held[r]) // units for r, units in demand.items() if units > 0]
    return max(0, min(counts)) if counts else 0


def _room(snapshot: Any, site: str, demand: Mapping[str, int], held: Mapping[str, Counter[str]]) -> int:
    """How many more placeholders of ``demand`` the site's nodes have room for."""
    if not any(is_gpu_resource(r) for r in demand):
        return 0  # a pool holds GPUs; a profile without one has nothing to keep warm
    return sum(_fits_times(node, demand, held.get(node.name, Counter())) for node in _site_nodes(snapshot, site))


def _hold_somewhere(snapshot: Any, site: str, demand: Mapping[str, int], held: dict[str, Counter[str]]) -> None:
    for node in _site_nodes(snapshot, site):
        if _fits_times(node, demand, held.setdefault(node.name, Counter())) > 0:
            held[node.name].update(demand)
            return
