"""Node, pod and NamespaceOffloading builders for the doctor tests."""

from __future__ import annotations

from typing import Any

from jupyter_gpuburst import liqo


def node(name: str, gpus: int = 0, *, ready: bool = True, donor: str | None = None, resource: str = "nvidia.com/gpu", unschedulable: bool = False) -> dict[str, Any]:
    labels = {"kubernetes.io/hostname": name}
    spec: dict[str, Any] = {}
    if donor is not None:
        labels.update(liqo.virtual_node_labels(donor))
        spec["taints"] = [liqo.virtual_node_taint()]
    if unschedulable:
        spec["unschedulable"] = True
    allocatable = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    if gpus:
        allocatable[resource] = str(gpus)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {
            "capacity": dict(allocatable),
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                            "reason": "KubeletReady" if ready else "PeeringDown", "message": "" if ready else "peering lost"}],
        },
    }


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
