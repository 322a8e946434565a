"""What a server pod asks for, from the pod KubeSpawner builds or from the traits it builds it from.

Placement must fit exactly what is created, so the spawner derives the request from the built pod
manifest (``request_of_pod``). Where no pod is built yet (the spawn form shows where each profile
would start), the same request comes from KubeSpawner's traits with a profile's overrides
(``pod_spec_from_traits``), written as KubeSpawner writes them: ``*_guarantee`` and
``extra_resource_guarantees`` become requests, ``*_limit`` and ``extra_resource_limits`` limits.
Either way the effective request follows Kubernetes (``core.quantities.pod_requests``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from jupyter_gpuburst.core.quantities import COMPUTE_RESOURCES, PODS, pod_requests

# KubeSpawner traits that decide what the pod requests (and that kubespawner_override may set)
RESOURCE_TRAITS = (
    "cpu_guarantee",
    "cpu_limit",
    "mem_guarantee",
    "mem_limit",
    "extra_resource_guarantees",
    "extra_resource_limits",
    "init_containers",
    "extra_containers",
)


class PodDemand(NamedTuple):
    """The GPU a pod asks for and its whole request in placement units (pod slot left out)."""

    resource: str
    count: int
    resources: dict[str, int]


def pod_spec_from_traits(values: Mapping[str, Any]) -> dict[str, Any]:
    """The resource-bearing part of the pod spec KubeSpawner's ``make_pod`` would write."""
    requests: dict[str, Any] = {}
    limits: dict[str, Any] = {}
    if values.get("cpu_limit"):
        limits["cpu"] = values["cpu_limit"]
    if values.get("mem_limit"):
        limits["memory"] = values["mem_limit"]
    if values.get("cpu_guarantee"):
        requests["cpu"] = values["cpu_guarantee"]
    if values.get("mem_guarantee"):
        requests["memory"] = values["mem_guarantee"]
    limits.update(values.get("extra_resource_limits") or {})
    requests.update(values.get("extra_resource_guarantees") or {})
    notebook = {"name": "notebook", "resources": {"requests": requests, "limits": limits}}
    spec: dict[str, Any] = {"containers": [notebook, *(_camel_container(c) for c in values.get("extra_containers") or [])]}
    if values.get("init_containers"):
        spec["initContainers"] = [_camel_container(c) for c in values["init_containers"]]
    return spec


def _camel_container(container: Any) -> dict[str, Any]:
    """A container as a plain dict; KubeSpawner accepts models and snake_case dicts too."""
    if not isinstance(container, Mapping):
        container = getattr(container, "to_dict", lambda: {})()
    out = dict(container)
    if "restart_policy" in out and "restartPolicy" not in out:
        out["restartPolicy"] = out["restart_policy"]
    return out


def request_of_pod(spec: Mapping[str, Any], is_gpu: Callable[[str], bool]) -> PodDemand | None:
    """The GPU and the whole request of a pod spec (camelCase, as the API sees it).

    None when the pod asks for no GPU (a CPU server, which placement leaves to kube-scheduler).
    Raises ValueError when it asks for more than one GPU resource. Resources placement does not
    count (an extended resource that is not a configured GPU) are left to kube-scheduler.
    """
    counted = set(COMPUTE_RESOURCES)

    def tracked(resource: str) -> bool:
        return resource in counted or is_gpu(resource)

    total = pod_requests(spec, tracked)
    gpus = {r: v for r, v in total.items() if r not in counted}
    if not gpus:
        return None
    if len(gpus) > 1:
        raise ValueError(f"a server may request one GPU resource, not {', '.join(sorted(gpus))}")
    ((resource, count),) = gpus.items()
    resources = {r: v for r, v in total.items() if r != PODS}
    return PodDemand(resource, count, resources)
