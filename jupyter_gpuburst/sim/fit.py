"""What kube-scheduler's filters decide for one pod and one node: taints, affinity, resources.

The filters run in kube-scheduler's default order and, per node, the first that fails gives the
node's reason: NodeUnschedulable, TaintToleration, NodeAffinity (nodeSelector and required
affinity), NodeResourcesFit (pod count, cpu, memory, every extended resource). A NotReady node
counts as tainted ``node.kubernetes.io/not-ready`` (``unreachable`` when its status is Unknown),
as the node lifecycle controller would taint it. The scheduler (``scheduler``) and its preemption
step (``preemption``) share them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from jupyter_gpuburst.core.nodeselector import matches_node_affinity
from jupyter_gpuburst.sim.storage import VOLUME_NODE_CONFLICT
from jupyter_gpuburst.sim.store import TERMINAL_PHASES

Obj = dict[str, Any]
_NOT_READY_TAINT = {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
_UNREACHABLE_TAINT = {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}

# Reasons kube-scheduler marks UnschedulableAndUnresolvable: preemption cannot help there.
UNSCHEDULABLE = "node(s) were unschedulable"
AFFINITY_MISMATCH = "node(s) didn't match Pod's node affinity/selector"
TOO_MANY_PODS = "Too many pods"


def resolvable(reason: str) -> bool:
    """Whether evicting pods could remove this reason (kube-scheduler: not UnschedulableAndUnresolvable)."""
    return reason not in (UNSCHEDULABLE, AFFINITY_MISMATCH, VOLUME_NODE_CONFLICT) and not reason.startswith("node(s) had untolerated taint")


def untolerated_taint_reason(taint: Mapping[str, Any]) -> str:
    return f"node(s) had untolerated taint {{{taint.get('key', '')}: {taint.get('value', '')}}}"


def pod_requests(pod: Obj) -> dict[str, int | float]:
    """Effective requests: the larger of the containers' sum and any init container, plus overhead."""
    spec = pod.get("spec") or {}
    total: dict[str, Any] = {}
    for c in spec.get("containers") or []:
        for res, qty in ((c.get("resources") or {}).get("requests") or {}).items():
            total[res] = total.get(res, 0) + parse_quantity(qty)
    for c in spec.get("initContainers") or []:
        for res, qty in ((c.get("resources") or {}).get("requests") or {}).items():
            total[res] = max(total.get(res, 0), parse_quantity(qty))
    for res, qty in (spec.get("overhead") or {}).items():
        total[res] = total.get(res, 0) + parse_quantity(qty)
    return total


def tolerates(tolerations: list[Obj], taint: Mapping[str, Any]) -> bool:
    """corev1 Toleration.ToleratesTaint."""
    for tol in tolerations:
        if tol.get("effect") and tol["effect"] != taint.get("effect"):
            continue
        op = tol.get("operator") or "Equal"
        if not tol.get("key"):
            if op == "Exists":
                return True
            continue
        if tol["key"] != taint.get("key"):
            continue
        if op == "Exists" or (op == "Equal" and (tol.get("value") or "") == (taint.get("value") or "")):
            return True
    return False


def _node_ready_status(node: Obj) -> str:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status", "Unknown")
    return "Unknown"


def effective_taints(node: Obj) -> list[Obj]:
    """The node's taints plus the one the node lifecycle controller adds while it is not Ready."""
    taints = list((node.get("spec") or {}).get("taints") or [])
    ready = _node_ready_status(node)
    if ready != "True":
        extra = _NOT_READY_TAINT if ready == "False" else _UNREACHABLE_TAINT
        if not any(t.get("key") == extra["key"] for t in taints):
            taints.append(dict(extra))
    return taints


@dataclass
class NodeUsage:
    """Requests of the non-terminal pods bound to one node."""

    requested: Counter[str] = field(default_factory=Counter)
    pods: int = 0


def usage_by_node(pods: list[Obj]) -> dict[str, NodeUsage]:
    usage: dict[str, NodeUsage] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
            continue
        u = usage.setdefault(node, NodeUsage())
        u.pods += 1
        for res, qty in pod_requests(pod).items():
            u.requested[res] += qty
    return usage


def filter_node(pod: Obj, node: Obj, usage: NodeUsage, requests: Mapping[str, Any]) -> list[str]:
    """Why ``pod`` does not fit ``node`` (empty when it fits); several reasons only for resources."""
    if (node.get("spec") or {}).get("unschedulable"):
        tolerations = (pod.get("spec") or {}).get("tolerations") or []
        if not tolerates(tolerations, {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}):
            return [UNSCHEDULABLE]
    tolerations = (pod.get("spec") or {}).get("tolerations") or []
    for taint in effective_taints(node):
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            return [untolerated_taint_reason(taint)]
    if not matches_node_affinity(pod, node):
        return [AFFINITY_MISMATCH]
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    reasons = []
    if "pods" in allocatable and usage.pods + 1 > parse_quantity(allocatable["pods"]):
        reasons.append(TOO_MANY_PODS)
    for res, qty in sorted(requests.items()):
        if qty <= 0:
            continue
        have = parse_quantity(allocatable[res]) if res in allocatable else 0
        if usage.requested[res] + qty > have:
            reasons.append(f"Insufficient {res}")
    return reasons
