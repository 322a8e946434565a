"""Node, pod and NamespaceOffloading builders for the doctor tests."""

from __future__ import annotations

from typing import Any

from jupyter_gpuburst.bench import synthetic


def node(name: str, gpus: int = 0, *, ready: bool = True, donor: str | None = None, resource: str = "nvidia.com/gpu", unschedulable: bool = False) -> dict[str, Any]:
    """A node (a Liqo virtual node with ``donor``) whose Ready condition says why, as doctor reports it."""
    obj = synthetic.node(name, {resource: gpus} if gpus else {}, cluster_id=donor, ready=ready, unschedulable=unschedulable)
    obj["status"]["conditions"][0].update(
        reason="KubeletReady" if ready else "PeeringDown", message="" if ready else "peering lost"
    )
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
