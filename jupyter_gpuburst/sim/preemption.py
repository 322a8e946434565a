"""kube-scheduler's DefaultPreemption: make room for a pod that fits nowhere by evicting lower-priority pods.

As pkg/scheduler/framework/preemption does: a pod with ``preemptionPolicy: Never`` never
preempts; a node is a candidate when removing every lower-priority pod on it makes the pod fit
(nodes that failed for a reason preemption cannot change are skipped); victims are then
reprieved, most important first, while the pod still fits. Both steps leave room for the pods
already nominated to the node with a priority at least the pod's own (kube-scheduler's
RunFilterPluginsWithNominatedPods), and a node where the pod would evict nobody is no candidate
(DryRunPreemption: "expected at least one victim pod"): room someone else's preemption freed is
theirs, not a second preemptor's. The chosen node has the lowest
highest-victim priority, then the lowest sum of victim priorities, then the fewest victims.
The preemptor gets ``status.nominatedNodeName`` with its PodScheduled=False condition in
one update (kube-scheduler's updatePod with its nominating info); each victim gets the ``DisruptionTarget``
condition (reason ``PreemptionByScheduler``) and a ``Preempted`` event, and is deleted with its
grace period. While victims terminate, the node's freed room is held for the nominated pod:
pods of lower priority do not take it (``nominated_usage``). PodDisruptionBudgets are not
emulated.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jupyter_gpuburst.sim import defaults
from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.fit import NodeUsage, filter_node, pod_requests, resolvable
from jupyter_gpuburst.sim.priority import priority_of
from jupyter_gpuburst.sim.store import TERMINAL_PHASES, Store

log = logging.getLogger(__name__)
Obj = dict[str, Any]

NOT_ELIGIBLE_NEVER = "preemption: not eligible due to preemptionPolicy=Never."
NOT_ELIGIBLE_TERMINATING = "preemption: not eligible due to a terminating pod on the nominated node."


@dataclass
class Candidate:
    node: str
    victims: list[Obj]

    def rank(self) -> tuple[int, int, int, str]:
        prios = [priority_of(v) for v in self.victims]
        return (max(prios, default=-(2**31)), sum(prios), len(prios), self.node)


def _active_on(pods: list[Obj], node: str) -> list[Obj]:
    return [
        p for p in pods if (p.get("spec") or {}).get("nodeName") == node and (p.get("status") or {}).get("phase") not in TERMINAL_PHASES
    ]


def not_eligible(pod: Obj, pods: list[Obj]) -> str:
    """Why ``pod`` may not preempt now (empty when it may): kube-scheduler's PodEligibleToPreemptOthers."""
    spec = pod.get("spec") or {}
    if spec.get("preemptionPolicy") == "Never":
        return NOT_ELIGIBLE_NEVER
    nominated = (pod.get("status") or {}).get("nominatedNodeName")
    if nominated:
        mine = priority_of(pod)
        for other in _active_on(pods, nominated):
            if other["metadata"].get("deletionTimestamp") and priority_of(other) < mine:
                return NOT_ELIGIBLE_TERMINATING
    return ""


def nominated_usage(pod: Obj, pending: Iterable[Obj]) -> dict[str, Counter[str]]:
    """Requests of pods nominated to each node that ``pod`` must leave room for (priority >= its own)."""
    mine, uid = priority_of(pod), pod["metadata"].get("uid")
    held: dict[str, Counter[str]] = {}
    for other in pending:
        node = (other.get("status") or {}).get("nominatedNodeName")
        if not node or other["metadata"].get("uid") == uid or priority_of(other) < mine:
            continue
        held.setdefault(node, Counter()).update(pod_requests(other))
        held[node]["pods"] += 1
    return held


def select_candidate(
    pod: Obj,
    nodes: list[Obj],
    pods: list[Obj],
    usage: Mapping[str, Any],
    failed: Mapping[str, list[str]],
    held: Mapping[str, Counter[str]] | None = None,
) -> Candidate | None:
    """The best node and its victims, or None when evicting lower-priority pods helps nowhere.

    ``failed``: node name -> why the pod did not fit there; only resolvable reasons make a candidate.
    ``held``: per node, what the pods nominated there (priority >= the pod's) still need
    (``nominated_usage``): counted as taken, so two preemptors never count on the same freed room."""
    mine = priority_of(pod)
    requests = pod_requests(pod)
    candidates = []
    for node in nodes:
        name = node["metadata"]["name"]
        why = failed.get(name)
        if not why or not all(resolvable(r) for r in why):
            continue
        base = usage.get(name) or NodeUsage()
        lower = [p for p in _active_on(pods, name) if priority_of(p) < mine and not p["metadata"].get("deletionTimestamp")]
        if not lower:
            continue
        room = NodeUsage(Counter(base.requested), base.pods)
        nominated = (held or {}).get(name)
        if nominated:
            room.requested.update({k: v for k, v in nominated.items() if k != "pods"})
            room.pods += nominated["pods"]
        for victim in lower:
            room.requested.subtract(pod_requests(victim))
            room.pods -= 1
        if filter_node(pod, node, room, requests):
            continue
        # reprieve the most important pods first (higher priority, then the older)
        lower.sort(key=lambda p: (-priority_of(p), (p.get("status") or {}).get("startTime") or ""))
        victims = []
        for p in lower:
            room.requested.update(pod_requests(p))
            room.pods += 1
            if filter_node(pod, node, room, requests):
                room.requested.subtract(pod_requests(p))
                room.pods -= 1
                victims.append(p)
        if victims:  # the pod fits without evicting anyone: not a preemption (the next pass binds it, or it waits)
            candidates.append(Candidate(name, victims))
    return min(candidates, key=Candidate.rank) if candidates else None


def preempt(
    store: Store, pod: Obj, candidate: Candidate, host: str, unschedulable: Callable[[Obj], None]
) -> tuple[Obj, dict[str, Obj | None]]:
    """Nominate the node for ``pod`` and evict the victims (condition, event, graceful delete).

    ``unschedulable`` sets the pod's PodScheduled=False condition: kube-scheduler writes it with
    the nomination in one status update, before the victims go, so a reader never sees the pod
    refused without its nomination. Returns the nominated pod as now stored and each victim's
    state by uid (terminating, or None once gone), so that the rest of a scheduling pass sees
    them as kube-scheduler's cache does."""
    meta = pod["metadata"]
    scheduler = (pod.get("spec") or {}).get("schedulerName", "default-scheduler")
    stamp = defaults.timestamp(store.now())

    def nominate(p: Obj) -> None:
        p.setdefault("status", {})["nominatedNodeName"] = candidate.node
        unschedulable(p)

    nominated = store.mutate("pods", meta["namespace"], meta["name"], nominate)
    evicted: dict[str, Obj | None] = {}
    for victim in candidate.victims:
        vmeta = victim["metadata"]

        def disrupt(p: Obj) -> None:
            status = p.setdefault("status", {})
            conditions = [c for c in status.get("conditions") or [] if c.get("type") != "DisruptionTarget"]
            conditions.append(
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "PreemptionByScheduler",
                    "message": f"{scheduler}: preempting to accommodate a higher priority pod",
                    "lastProbeTime": None,
                    "lastTransitionTime": stamp,
                }
            )
            status["conditions"] = conditions

        try:
            updated = store.mutate("pods", vmeta["namespace"], vmeta["name"], disrupt)
            # preemption.go prepareCandidate: "Preempted by pod %v on node %v" (the preemptor's UID)
            store.record_event(
                updated,
                "Preempted",
                f"Preempted by pod {meta.get('uid')} on node {candidate.node}",
                component=scheduler,
                scheduler_style=True,
                host=host,
            )
            store.delete("pods", vmeta["namespace"], vmeta["name"])
        except ApiError as exc:
            log.info("preempting %s/%s failed: %s", vmeta["namespace"], vmeta["name"], exc.message)
        evicted[vmeta["uid"]] = _stored(store, vmeta)
    log.info("pod %s/%s preempts %d pod(s) on %s", meta["namespace"], meta["name"], len(candidate.victims), candidate.node)
    return nominated, evicted


def _stored(store: Store, meta: Obj) -> Obj | None:
    """The pod as stored now (a copy), or None when it is gone."""
    if not store.exists("pods", meta["namespace"], meta["name"]):
        return None
    pod = store.get("pods", meta["namespace"], meta["name"])
    return pod if pod["metadata"].get("uid") == meta.get("uid") else None
