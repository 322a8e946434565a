"""Node, pod and NamespaceOffloading builders for the doctor tests, and a cluster view over them."""

from __future__ import annotations

from typing import Any

from jupyter_gpuburst import doctor
from jupyter_gpuburst.bench import synthetic
from jupyter_gpuburst.core import liqo


def node(
    name: str, gpus: int = 0, *, ready: bool = True, donor: str | None = None, resource: str = "nvidia.com/gpu", unschedulable: bool = False
) -> dict[str, Any]:
    """A node (a Liqo virtual node with ``donor``) whose Ready condition says why, as doctor reports it."""
    obj = synthetic.node(name, {resource: gpus} if gpus else {}, cluster_id=donor, ready=ready, unschedulable=unschedulable)
    obj["status"]["conditions"][0].update(reason="KubeletReady" if ready else "PeeringDown", message="" if ready else "peering lost")
    return obj


def gpu_pod(name: str, node_name: str, gpus: int, namespace: str = "default") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "notebook", "image": "jupyter/base", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
        },
        "status": {"phase": "Running"},
    }


class FakeCluster:
    """A ClusterView over in-memory objects, with a deny set for access reviews; without storage
    classes (or Liqo's virtual kubelet templates), this identity may not list them."""

    def __init__(self, nodes, pods=(), offloadings=None, groups=None, denied=(), storage_classes=None, templates=None):
        self.storage_classes = storage_classes
        self.templates = templates
        self.nodes = list(nodes)
        self.pods = list(pods)
        self.offloadings = dict(offloadings or {})
        self.groups = {liqo.OFFLOADING_GROUP, "apps"} if groups is None else set(groups)
        self.denied = set(denied)
        self.reviews: list[tuple[str, str, str, str | None]] = []

    def list_nodes(self):
        return self.nodes

    def list_pods(self):
        return self.pods

    def api_groups(self):
        return self.groups

    def access_review(self, verb, group, resource, namespace):
        self.reviews.append((verb, group, resource, namespace))
        if (verb, resource) in self.denied:
            return False, "RBAC: no rule"
        return True, ""

    def namespace_offloading(self, namespace):
        return self.offloadings.get(namespace)

    def list_storage_classes(self):
        if self.storage_classes is None:
            raise doctor.NotPermitted("this identity may not list storage classes")
        return self.storage_classes

    def vk_options_templates(self):
        if self.templates is None:
            raise doctor.NotPermitted("this identity may not list Liqo's virtual kubelet templates")
        return self.templates


def healthy(**overrides: Any) -> FakeCluster:
    args: dict[str, Any] = dict(
        nodes=[node("gpu-a", 2), node("cpu-a"), node("liqo-donor-1", 8, donor="donor-1")],
        pods=[gpu_pod("busy", "gpu-a", 1)],
        offloadings={"jhub": liqo.namespace_offloading("jhub")},
    )
    args.update(overrides)
    return FakeCluster(**args)
