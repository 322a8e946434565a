"""Synthetic Node and Pod objects, shaped like the API server's, for benchmarks and tests."""

from __future__ import annotations

import json
import random
from collections.abc import Mapping
from typing import Any

from jupyter_gpuburst.core import keys, liqo

MIG_RESOURCE = "nvidia.com/mig-1g.10gb"


def node(
    name: str,
    gpus: Mapping[str, int] | None = None,
    *,
    cluster_id: str | None = None,
    ready: bool = True,
    unschedulable: bool = False,
    taints: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """A Node; with ``cluster_id`` it is a Liqo virtual node for that donor."""
    labels = {"kubernetes.io/hostname": name}
    node_taints = list(taints or [])
    if cluster_id is not None:
        labels.update(liqo.virtual_node_labels(cluster_id))
        node_taints.append(liqo.virtual_node_taint())
    allocatable = {"cpu": "32", "memory": "256Gi", "pods": "110"}
    allocatable.update({resource: str(count) for resource, count in (gpus or {}).items()})
    spec: dict[str, Any] = {}
    if unschedulable:
        spec["unschedulable"] = True
    if node_taints:
        spec["taints"] = node_taints
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
        "status": {
            "capacity": dict(allocatable),
            "allocatable": allocatable,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def pod(
    name: str,
    *,
    namespace: str = "jupyter",
    node_name: str | None = None,
    gpus: Mapping[str, int] | None = None,
    phase: str = "Running",
    site: str | None = None,
    user: str | None = None,
    groups: list[str] | None = None,
) -> dict[str, Any]:
    """A single-container Pod holding ``gpus`` (limits only, as KubeSpawner writes them)."""
    limits = {resource: str(count) for resource, count in (gpus or {}).items()}
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": {}, "annotations": {}}
    if site is not None:
        metadata["labels"][keys.SITE_LABEL] = site
    if user is not None:
        metadata["annotations"][keys.USER_ANNOTATION] = user
    if groups is not None:
        metadata["annotations"][keys.GROUPS_ANNOTATION] = json.dumps(sorted(groups))
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "notebook",
                "image": "quay.io/jupyter/base-notebook:latest",
                "resources": {"limits": limits} if limits else {},
            }
        ]
    }
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": {"phase": phase}}


def federation(n_nodes: int, n_donors: int = 3, mig_share: float = 0.2, seed: int = 7) -> list[dict[str, Any]]:
    """``n_nodes`` local GPU nodes (4-8 GPUs, a share of them MIG) plus ``n_donors`` virtual nodes."""
    rng = random.Random(seed)
    nodes = []
    for i in range(n_nodes):
        if rng.random() < mig_share:
            nodes.append(node(f"mig-node-{i}", {MIG_RESOURCE: 7 * rng.choice((1, 2, 4, 8))}))
        else:
            nodes.append(node(f"gpu-node-{i}", {"nvidia.com/gpu": rng.randint(4, 8)}))
    for d in range(n_donors):
        nodes.append(node(f"liqo-donor-{d}", {"nvidia.com/gpu": 64, MIG_RESOURCE: 56}, cluster_id=f"donor-{d}"))
    return nodes


def bound_pods(nodes: list[dict[str, Any]], n_pods: int, seed: int = 11) -> list[dict[str, Any]]:
    """``n_pods`` pods bound to ``nodes`` without over-committing any (the rest are CPU-only)."""
    rng = random.Random(seed)
    free = {
        n["metadata"]["name"]: {r: int(v) for r, v in n["status"]["allocatable"].items() if "/" in r}
        for n in nodes
    }
    names = list(free)
    donor_of = {n["metadata"]["name"]: liqo.remote_cluster_id(n) for n in nodes}
    pods = []
    for i in range(n_pods):
        node_name = rng.choice(names)
        gpus: dict[str, int] = {}
        for resource, available in free[node_name].items():
            if available and rng.random() < 0.5:
                want = min(available, rng.choice((1, 1, 2, 4)))
                gpus[resource] = want
                free[node_name][resource] -= want
                break
        site = donor_of[node_name]
        pods.append(pod(f"pod-{i}", node_name=node_name, gpus=gpus, site=site, user=f"user{i % 500}" if site else None))
    return pods
