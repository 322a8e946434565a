"""Whether the scheduler's refusal of a pinned pod means its site is short of what the pod asks.

Placement counts every resource a pod requests, but between the decision and the pod's creation
someone else's pod can take what was counted free. kube-scheduler then refuses the pinned pod with
a message such as ``0/3 nodes are available: 1 Insufficient memory, 2 node(s) didn't match Pod's
node affinity/selector.``: the site is short of something this pod asks for, so another site may
still fit it. Refusals for anything else (a taint, a volume's zone) are not moved: another site
would not cure them, and the spawn's own timeout reports them. Nor is a pod the scheduler has
nominated a node for (``status.nominatedNodeName``): it is preempting lower-priority pods there (a
warm pool's placeholders) and is bound as soon as they are gone. Nor is a donor's pod that the
donor's kubelet is starting (``started_on_donor``): it has its room, and is pulling its image.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

# kube-scheduler's wording (pkg/scheduler/framework/plugins/noderesources/fit.go)
_INSUFFICIENT = re.compile(r"\bInsufficient ([A-Za-z0-9./_-]+)")
TOO_MANY_PODS = "Too many pods"


def requested_resources(pod: Mapping[str, Any]) -> set[str]:
    """Every resource the pod's containers request (a limit alone counts: it defaults the request)."""
    spec = pod.get("spec") or {}
    names: set[str] = set()
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        resources = container.get("resources") or {}
        for kind in ("requests", "limits"):
            names.update((resources.get(kind) or {}).keys())
    return names


def shortage(message: str, requested: Iterable[str]) -> bool:
    """True when ``message`` says the nodes lack one of ``requested`` or have no pod slot left."""
    wanted = set(requested)
    if TOO_MANY_PODS in message:
        return True
    return any(match.group(1).rstrip(".,") in wanted for match in _INSUFFICIENT.finditer(message))


def preempting(pod: Mapping[str, Any]) -> bool:
    """The scheduler is making room for ``pod`` by preemption on the node it nominated."""
    return bool((pod.get("status") or {}).get("nominatedNodeName"))


def started_on_donor(pod: Mapping[str, Any]) -> bool:
    """A donor's node has the pod and is starting it: Liqo reflects the donor pod's container
    statuses (``ContainerCreating`` while its image is pulled, minutes for a CUDA image over a
    WAN), which only a kubelet writes. Such a pod is Pending, but no longer for lack of room."""
    return bool((pod.get("status") or {}).get("containerStatuses"))


def unschedulable_reason(pod: Mapping[str, Any], resource: str | None = None) -> str | None:
    """The scheduler's message when ``pod`` is unschedulable for lack of something it requests.

    ``resource`` (the placed GPU resource) counts as requested even if the pod as read lacks it.
    """
    if preempting(pod):
        return None
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False" and condition.get("reason") == "Unschedulable":
            message = condition.get("message") or ""
            if shortage(message, _wanted(pod, resource)):
                return message
    return None


def failed_scheduling_reason(
    events: Iterable[Mapping[str, Any]], pod: Mapping[str, Any] | None, uid: str | None, resource: str | None = None
) -> str | None:
    """The message of a ``FailedScheduling`` event about this pod (its name, and ``uid``: not an
    earlier pod of that name) that names a shortage.

    A donor's own scheduler failing shows on the origin only as such events.
    """
    pod = pod or {}
    if preempting(pod):
        return None
    name = (pod.get("metadata") or {}).get("name")
    wanted = _wanted(pod, resource)
    for event in events:
        if event.get("reason") != "FailedScheduling":
            continue
        involved = event.get("involvedObject") or {}
        if (name and involved.get("name") not in (None, name)) or (uid and involved.get("uid") not in (None, uid)):
            continue
        message = event.get("message") or ""
        if shortage(message, wanted):
            return message
    return None


def _wanted(pod: Mapping[str, Any], resource: str | None) -> set[str]:
    wanted = requested_resources(pod)
    if resource:
        wanted.add(resource)
    return wanted
