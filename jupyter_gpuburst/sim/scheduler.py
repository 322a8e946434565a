"""A kube-scheduler for one emulated cluster: filters, scoring, binding, FailedScheduling.

The filters (``sim/fit.py``) run in kube-scheduler's default order; feasible nodes are scored by
LeastAllocated and ImageLocality (a node that has the pod's image wins over an emptier one
without it, as a pull costs more). The scheduler is event-driven: a new pending pod is
tried at once; a pod that did not fit is retried on the next node change or freed capacity, no
sooner than its backoff (1 s doubling to 10 s) allows. Pending pods are tried in priority order
(higher ``spec.priority`` first, then the older), and one that fits nowhere may preempt
lower-priority pods (``sim/preemption.py``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from jupyter_gpuburst.sim import defaults, preemption
from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.fit import (  # noqa: F401 - tolerates, effective_taints: kept importable from here
    NodeUsage,
    effective_taints,
    filter_node,
    pod_requests,
    resolvable,
    tolerates,
    usage_by_node,
)
from jupyter_gpuburst.sim.storage import VolumeBinding
from jupyter_gpuburst.sim.store import TERMINAL_PHASES, Store

log = logging.getLogger(__name__)

Obj = dict[str, Any]

SCHEDULER_NAME = "default-scheduler"


# ImageLocality (pkg/scheduler/framework/plugins/imagelocality): image sizes count between these
MIN_IMAGE_THRESHOLD = 23 * 1024 * 1024
MAX_CONTAINER_IMAGE_THRESHOLD = 1000 * 1024 * 1024
MAX_NODE_SCORE = 100


def _score(node: Obj, usage: NodeUsage, requests: Mapping[str, Any]) -> float:
    """LeastAllocated over cpu and memory (0-100): the emptier node wins, as kube-scheduler's default."""
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    fractions = []
    for res in ("cpu", "memory"):
        cap = parse_quantity(allocatable.get(res, "0"))
        if cap > 0:
            fractions.append(min(1.0, float((usage.requested[res] + requests.get(res, 0)) / cap)))
    return MAX_NODE_SCORE * (1 - sum(fractions) / len(fractions)) if fractions else 0.0


def image_spread(nodes: list[Obj]) -> Counter[str]:
    """How many of ``nodes`` report each image in ``status.images`` (ImageLocality's spread)."""
    spread: Counter[str] = Counter()
    for node in nodes:
        for image in (node.get("status") or {}).get("images") or []:
            spread.update(set(image.get("names") or []))
    return spread


def image_locality(pod: Obj, node: Obj, spread: Counter[str], total_nodes: int) -> float:
    """kube-scheduler's ImageLocality score (0-100): the pod's images already on the node, by size,
    scaled by how many nodes have them (an image everywhere favours no node)."""
    if not spread or total_nodes == 0:
        return 0.0
    sizes = {
        name: image.get("sizeBytes", 0) for image in (node.get("status") or {}).get("images") or [] for name in image.get("names") or []
    }
    spec = pod.get("spec") or {}
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    total = sum(sizes[c["image"]] * spread[c["image"]] / total_nodes for c in containers if c.get("image") in sizes)
    top = MAX_CONTAINER_IMAGE_THRESHOLD * max(1, len(containers))
    total = min(max(total, MIN_IMAGE_THRESHOLD), top)
    return MAX_NODE_SCORE * (total - MIN_IMAGE_THRESHOLD) / (top - MIN_IMAGE_THRESHOLD)


def failure_message(total: int, reasons: Counter[str], post_filter: str | None = None) -> str:
    """kube-scheduler's FitError text, including the preemption postfilter's summary.

    ``post_filter``: the postfilter's own message instead of "no victims" (empty when preemption
    nominated a node: kube-scheduler then adds nothing)."""
    if total == 0:
        return "no nodes available to schedule pods"
    parts = sorted(f"{n} {r}" for r, n in reasons.items())
    if post_filter is not None:
        return f"0/{total} nodes are available: {', '.join(parts)}." + (f" {post_filter}" if post_filter else "")
    preempt: Counter[str] = Counter()
    for node_reason, n in reasons.items():
        if not resolvable(node_reason):
            preempt["Preemption is not helpful for scheduling"] += n
    resolvable_nodes = total - sum(preempt.values())
    if resolvable_nodes > 0:
        preempt["No preemption victims found for incoming pod"] += resolvable_nodes
    post = sorted(f"{n} {r}" for r, n in preempt.items())
    return f"0/{total} nodes are available: {', '.join(parts)}. preemption: 0/{total} nodes are available: {', '.join(post)}."


def schedule_one(
    pod: Obj,
    nodes: list[Obj],
    pods: list[Obj],
    volumes: VolumeBinding | None = None,
    usage: dict[str, NodeUsage] | None = None,
    *,
    held: Mapping[str, Counter[str]] | None = None,
    failed: dict[str, list[str]] | None = None,
) -> tuple[str | None, str]:
    """(node name, "") when the pod fits somewhere, else (None, FailedScheduling message).

    With several reasons on one node (only resources give several), each one counts, as in
    kube-scheduler's diagnosis. ``volumes`` adds the volume steps (sim/storage.py). ``usage``,
    when given, is what ``pods`` request per node, already counted (kube-scheduler's cache).
    ``held``: per node, what pods nominated there by preemption still need (kept free for them).
    ``failed`` collects each node's reasons (the preemption step reads them)."""
    if volumes is not None and nodes:
        why = volumes.prefilter(pod)
        if why:
            # a PreFilter rejection: every node at once, and preemption cannot help
            n = len(nodes)
            return (
                None,
                f"0/{n} nodes are available: {why}. preemption: 0/{n} nodes are available: {n} Preemption is not helpful for scheduling.",
            )
    if usage is None:
        usage = usage_by_node(pods)
    requests = pod_requests(pod)
    spread = image_spread(nodes)
    reasons: Counter[str] = Counter()
    feasible: list[tuple[float, str]] = []
    for node in nodes:
        name = node["metadata"]["name"]
        u = usage.get(name, NodeUsage())
        if held and name in held:
            reserved = held[name]
            u = NodeUsage(u.requested + Counter({k: v for k, v in reserved.items() if k != "pods"}), u.pods + reserved["pods"])
        why = filter_node(pod, node, u, requests)
        if not why and volumes is not None:
            why = [w for w in (volumes.filter(pod, node),) if w]
        if why:
            reasons.update(why)
            if failed is not None:
                failed[name] = why
        else:
            score = _score(node, u, requests) + image_locality(pod, node, spread, len(nodes))
            feasible.append((-score, name))
    if feasible:
        return min(feasible)[1], ""
    return None, failure_message(len(nodes), reasons)


class Scheduler:
    """Binds this cluster's pending pods (schedulerName default-scheduler) as they appear."""

    def __init__(
        self,
        store: Store,
        *,
        backoff_initial_s: float = 1.0,
        backoff_max_s: float = 10.0,
        host: str = "sim",
        volumes: VolumeBinding | None = None,
    ):
        self.store = store
        self.volumes = volumes
        if volumes is not None:
            # a claim that binds can make a waiting pod schedulable, as kube-scheduler requeues on PVC events
            volumes.on_change = self._volumes_changed
        self.backoff_initial_s = backoff_initial_s
        self.backoff_max_s = backoff_max_s
        self.host = host
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task] = []
        self._fresh: set[tuple[str, str]] = set()  # pods to try right away
        self._changed = False  # capacity or nodes changed since the last pass
        # (namespace, name) -> (uid, attempts, earliest retry time)
        self._backoff: dict[tuple[str, str], tuple[str, int, float]] = {}
        self.bindings = 0

    async def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._watch_pods(), name="scheduler-pods"),
            asyncio.create_task(self._watch_nodes(), name="scheduler-nodes"),
            asyncio.create_task(self._loop(), name="scheduler-loop"),
        ]

    async def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    def _kick(self) -> None:
        self._wake.set()

    def _volumes_changed(self) -> None:
        self._changed = True
        self._kick()

    async def _watch_pods(self) -> None:
        watch = self.store.watch("pods", read_only=True)
        try:
            async for etype, pod in watch:
                meta, spec = pod["metadata"], pod.get("spec") or {}
                key = (meta.get("namespace"), meta["name"])
                phase = (pod.get("status") or {}).get("phase")
                if etype == "DELETED":
                    self._backoff.pop(key, None)
                    self._fresh.discard(key)
                    if spec.get("nodeName"):
                        self._changed = True
                elif etype == "ADDED" and not spec.get("nodeName"):
                    self._fresh.add(key)
                elif spec.get("nodeName") and (phase in TERMINAL_PHASES or meta.get("deletionTimestamp")):
                    self._changed = True
                else:
                    continue
                self._kick()
        finally:
            watch.close()

    async def _watch_nodes(self) -> None:
        watch = self.store.watch("nodes", read_only=True)
        try:
            async for _etype, _node in watch:
                self._changed = True
                self._kick()
        finally:
            watch.close()

    async def _loop(self) -> None:
        while True:
            timeout = self._next_due()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout)
            except TimeoutError:
                pass
            self._wake.clear()
            try:
                self.run_once()
            except Exception:  # a scheduler bug must not stop the cluster
                log.exception("scheduling pass failed")

    def _next_due(self) -> float | None:
        """Seconds until the earliest backoff ends, when a change is waiting for it."""
        if not self._changed or not self._backoff:
            return None
        return max(0.0, min(due for _, _, due in self._backoff.values()) - time.monotonic())

    def run_once(self) -> None:
        """One pass over pending pods: fresh ones always, backed-off ones after a change."""
        now = time.monotonic()
        changed, self._changed = self._changed, False
        # the stored objects themselves, read-only: a pass must not copy every pod of the cluster
        # (at 200 pods that copy was most of the pass); changes go through the store's API
        pods = list(self.store.iter_objects("pods"))
        nodes = sorted(self.store.iter_objects("nodes"), key=lambda n: n["metadata"]["name"])
        pending = [
            p
            for p in pods
            if not (p.get("spec") or {}).get("nodeName")
            and not p["metadata"].get("deletionTimestamp")
            and (p.get("spec") or {}).get("schedulerName", SCHEDULER_NAME) == SCHEDULER_NAME
            and (p.get("status") or {}).get("phase", "Pending") == "Pending"
        ]
        # kube-scheduler's PrioritySort queue: higher priority first, then the older
        pending.sort(
            key=lambda p: (
                -preemption.priority_of(p),
                p["metadata"].get("creationTimestamp", ""),
                p["metadata"].get("namespace", ""),
                p["metadata"]["name"],
            )
        )
        usage: dict[str, NodeUsage] | None = None  # counted once per pass, at the first attempt
        # the pass's view of the pods still waiting, kept current as pods bind or get nominated:
        # the room a nominated pod holds is read from it (kube-scheduler's nominator)
        unbound = {p["metadata"].get("uid"): p for p in pending}
        waiting = False
        for pod in pending:
            key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
            fresh = key in self._fresh
            self._fresh.discard(key)
            backoff = self._backoff.get(key)
            if backoff and backoff[0] != pod["metadata"].get("uid"):
                backoff = None
            if not fresh and backoff is not None:
                if not changed:
                    continue
                if backoff[2] > now:
                    waiting = True
                    continue
            elif not fresh and backoff is None and not changed:
                continue
            if usage is None:
                usage = usage_by_node(pods)
            self._attempt(unbound.get(pod["metadata"].get("uid"), pod), nodes, pods, backoff, now, usage, unbound)
        if waiting:
            self._changed = True  # the change still owes those pods a try when their backoff ends

    def _attempt(
        self,
        pod: Obj,
        nodes: list[Obj],
        pods: list[Obj],
        backoff: tuple[str, int, float] | None,
        now: float,
        usage: dict[str, NodeUsage],
        pending: dict[str, Obj],
    ) -> None:
        meta = pod["metadata"]
        key = (meta["namespace"], meta["name"])
        held = preemption.nominated_usage(pod, pending.values())
        failed: dict[str, list[str]] = {}
        node, message = schedule_one(pod, nodes, pods, self.volumes, usage, held=held, failed=failed)
        if node is not None:
            try:
                if self.volumes is not None:
                    self.volumes.prebind(pod, next(n for n in nodes if n["metadata"]["name"] == node))
                bound = self.store.bind_pod(meta["namespace"], meta["name"], node)
            except ApiError as exc:
                log.info("binding %s/%s failed: %s", *key, exc)
                return
            self._backoff.pop(key, None)
            self.bindings += 1
            # later pods in this pass see its requests, and no longer the room it was nominated to
            pods.append(bound)
            pending.pop(meta.get("uid"), None)
            counted = usage.setdefault(node, NodeUsage())
            counted.pods += 1
            counted.requested.update(pod_requests(bound))
            return
        nominated = False
        if failed:
            message, nominated = self._preempt(pod, nodes, pods, usage, failed, message, held, pending)
        attempts = (backoff[1] if backoff else 0) + 1
        delay = min(self.backoff_initial_s * 2 ** (attempts - 1), self.backoff_max_s)
        # a preemptor is tried again as soon as its victims are gone: kube-scheduler 1.35 requeues
        # it on their deletion and pops it from backoff while nothing else waits (it bound a pod
        # 0.1 s after nominating its node), so its refusal is often read after it is bound
        self._backoff[key] = (meta.get("uid", ""), attempts, now if nominated else now + delay)
        if not nominated:
            self._mark_unschedulable(pod, message)

    def _preempt(
        self,
        pod: Obj,
        nodes: list[Obj],
        pods: list[Obj],
        usage: dict[str, NodeUsage],
        failed: dict[str, list[str]],
        message: str,
        held: Mapping[str, Counter[str]],
        pending: dict[str, Obj],
    ) -> tuple[str, bool]:
        """The PostFilter step: nominate a node and evict victims when that helps.

        Returns the FailedScheduling text and whether a node was nominated (the nomination's
        update then carried the condition, and the event is recorded here, after it)."""
        reasons: Counter[str] = Counter(r for why in failed.values() for r in why)
        total = len(nodes)
        if len(failed) < total:  # a PreFilter (volume) rejection: the message is already final
            return message, False
        why_not = preemption.not_eligible(pod, pods)
        if why_not:
            return failure_message(total, reasons, why_not), False
        candidate = preemption.select_candidate(pod, nodes, pods, usage, failed, held)
        if candidate is None:
            return message, False
        refused = failure_message(total, reasons, "")
        try:
            nominated, evicted = preemption.preempt(self.store, pod, candidate, self.host, _unschedulable(refused, self.store.now()))
        except ApiError as exc:
            log.info("preemption for %s/%s failed: %s", pod["metadata"]["namespace"], pod["metadata"]["name"], exc.message)
            return message, False
        self._changed = True  # victims' deletions free the room
        _seen_preempted(pods, usage, pending, nominated, evicted)
        self._failed_scheduling(nominated, refused)
        return refused, True

    def _mark_unschedulable(self, pod: Obj, message: str) -> None:
        meta = pod["metadata"]
        try:
            updated = self.store.mutate("pods", meta["namespace"], meta["name"], _unschedulable(message, self.store.now()))
        except ApiError:
            return  # deleted meanwhile
        self._failed_scheduling(updated, message)

    def _failed_scheduling(self, pod: Obj, message: str) -> None:
        try:
            self.store.record_event(
                pod, "FailedScheduling", message, type="Warning", component=SCHEDULER_NAME, scheduler_style=True, host=self.host
            )
        except ApiError:
            pass  # its namespace is going


def _unschedulable(message: str, now: Any) -> Any:
    """A mutation setting PodScheduled=False (Unschedulable, ``message``), keeping the time it first turned False."""
    stamp = defaults.timestamp(now)

    def set_condition(p: Obj) -> None:
        status = p.setdefault("status", {})
        conditions = status.get("conditions") or []
        old = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
        cond = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
            "lastProbeTime": None,
            "lastTransitionTime": old["lastTransitionTime"] if old and old.get("status") == "False" else stamp,
        }
        status["conditions"] = [cond] + [c for c in conditions if c.get("type") != "PodScheduled"]

    return set_condition


def _seen_preempted(
    pods: list[Obj], usage: dict[str, NodeUsage], pending: dict[str, Obj], nominated: Obj, evicted: Mapping[str, Obj | None]
) -> None:
    """The rest of the pass sees a preemption as kube-scheduler's cache does: the preemptor
    nominated (holding its room), its victims terminating or gone (their room free), so that
    the next preemptor neither counts on that room nor picks the same victims."""
    pending[nominated["metadata"].get("uid")] = nominated
    kept = []
    for p in pods:
        victim_uid = p["metadata"].get("uid")
        if victim_uid not in evicted:
            kept.append(p)
            continue
        now = evicted[victim_uid]
        if now is not None:
            kept.append(now)  # terminating: it holds its room until it is gone
            continue
        counted = usage.get((p.get("spec") or {}).get("nodeName") or "")
        if counted is not None and (p.get("status") or {}).get("phase") not in TERMINAL_PHASES:
            counted.pods -= 1
            counted.requested.subtract(pod_requests(p))
    pods[:] = kept
