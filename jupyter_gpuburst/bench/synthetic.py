"""Synthetic Node and Pod objects, shaped like the API server's, for benchmarks and tests."""

from __future__ import annotations

import json
import random
from array import array
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
    cpu: str = "32",
    memory: str = "256Gi",
    pods: int = 110,
    images: list[str] | None = None,
) -> dict[str, Any]:
    """A Node; with ``cluster_id`` it is a Liqo virtual node for that donor (allocatable = grant).

    ``images``: what its kubelet reports in ``status.images`` (a tag and a digest name each)."""
    labels = {"kubernetes.io/hostname": name}
    node_taints = list(taints or [])
    if cluster_id is not None:
        labels.update(liqo.virtual_node_labels(cluster_id))
        node_taints.append(liqo.virtual_node_taint())
    allocatable = {"cpu": cpu, "memory": memory, "pods": str(pods)}
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
            **({"images": [_image_status(i, image) for i, image in enumerate(images)]} if images else {}),
        },
    }


def _image_status(i: int, image: str) -> dict[str, Any]:
    digest = f"{image.rpartition(':')[0]}@sha256:{i:064x}"
    return {"names": [digest, image], "sizeBytes": (50 - i) * 100 * 2**20}


# what a GPU node's kubelet reports: the cluster's own images, and the notebook image where a
# server ran before (a third of the nodes)
SYSTEM_IMAGES = [
    "nvcr.io/nvidia/k8s-device-plugin:v0.16.2",
    "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.7-3.5.0-ubuntu22.04",
    "nvcr.io/nvidia/gpu-feature-discovery:v0.8.2",
    "registry.k8s.io/kube-proxy:v1.31.1",
    "quay.io/jupyterhub/k8s-network-tools:4.0.0",
    "docker.io/library/busybox:1.36",
    "registry.k8s.io/pause:3.10",
]
NOTEBOOK_IMAGE = "quay.io/jupyter/pytorch-notebook:cuda12-2024-10-07"


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
    cpu: str | None = None,
    memory: str | None = None,
) -> dict[str, Any]:
    """A single-container Pod holding ``gpus`` (limits only, as KubeSpawner writes them) and
    requesting ``cpu``/``memory`` when given."""
    limits = {resource: str(count) for resource, count in (gpus or {}).items()}
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
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
                "resources": {**({"limits": limits} if limits else {}), **({"requests": requests} if requests else {})},
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
    free = {n["metadata"]["name"]: {r: int(v) for r, v in n["status"]["allocatable"].items() if "/" in r} for n in nodes}
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


# ---- a cluster at scale, as watch events --------------------------------------------------------
# Pod shapes: (GPU resource or None, GPUs, CPU millicores, memory GiB). The GPU ones are the
# profiles students pick; the rest is the origin's ordinary workload.
SHAPES: tuple[tuple[str | None, int, int, int], ...] = (
    ("nvidia.com/gpu", 1, 4000, 16),
    ("nvidia.com/gpu", 2, 8000, 32),
    ("nvidia.com/gpu", 4, 16000, 64),
    (MIG_RESOURCE, 1, 2000, 8),
    (None, 0, 500, 1),
    (None, 0, 2000, 4),
)
_GPU_SHAPES = (0, 0, 0, 1, 1, 2)
# about half of the origin's GPUs busy before the burst, the rest of the pods CPU-only
GPU_POD_SHARE = 0.12
_CPU_SHAPES = (4, 4, 5)


class ClusterPlan:
    """Nodes and a non-over-committed pod placement, kept compact (a few bytes per pod).

    Pods are written out one at a time (``pod_object``) as the API server would send them, so a
    benchmark can stream 500 000 of them through JSON without holding them all.
    """

    def __init__(self, n_nodes: int, n_pods: int, n_donors: int, seed: int = 7, mig_share: float = 0.2) -> None:
        rng = random.Random(seed)
        self.nodes: list[dict[str, Any]] = []
        # per node: GPU resource, and what is still free of it, CPU (m), memory (GiB), pod slots
        self.gpu_resource: list[str] = []
        self.free_gpu: list[int] = []
        self.free_cpu: list[int] = []
        self.free_mem: list[int] = []
        self.free_pods: list[int] = []
        for i in range(n_nodes):
            if rng.random() < mig_share:
                gpus, resource, name = 7 * rng.choice((1, 2, 4, 8)), MIG_RESOURCE, f"mig-node-{i}"
                cores, mem_gib = 64, 512
            else:
                gpus, resource, name = rng.randint(4, 8), "nvidia.com/gpu", f"gpu-node-{i}"
                cores, mem_gib = 16 * gpus, 96 * gpus
            images = [NOTEBOOK_IMAGE, *SYSTEM_IMAGES] if i % 3 == 0 else SYSTEM_IMAGES
            obj = node(name, {resource: gpus}, cpu=str(cores), memory=f"{mem_gib}Gi", images=images)
            self._add(obj, resource, gpus, cores * 1000, mem_gib, 110)
        for d in range(n_donors):
            grant = {"nvidia.com/gpu": 64, MIG_RESOURCE: 56}
            self._add(
                node(f"liqo-donor-{d}", grant, cluster_id=f"donor-{d}", cpu="512", memory="4Ti", pods=2000),
                "nvidia.com/gpu",
                64,
                512_000,
                4096,
                2000,
            )
        self.n_local = n_nodes
        self.pod_node = array("i")
        self.pod_shape = array("b")
        local = max(1, n_nodes)
        for _ in range(n_pods):
            for _attempt in range(8):
                n = rng.randrange(local)
                shapes = _GPU_SHAPES if rng.random() < GPU_POD_SHARE else _CPU_SHAPES
                shape = shapes[rng.randrange(len(shapes))]
                if self.fits(n, shape):
                    self.take(n, shape, +1)
                    self.pod_node.append(n)
                    self.pod_shape.append(shape)
                    break
            else:
                self.pod_node.append(-1)  # nowhere to go: stays out of the cluster
                self.pod_shape.append(4)
        self.alive = bytearray(1 if n >= 0 else 0 for n in self.pod_node)

    def _add(self, obj: dict[str, Any], resource: str, gpus: int, cpu: int, mem: int, pods: int) -> None:
        self.nodes.append(obj)
        self.gpu_resource.append(resource)
        self.free_gpu.append(gpus)
        self.free_cpu.append(cpu)
        self.free_mem.append(mem)
        self.free_pods.append(pods)

    def fits(self, n: int, shape: int) -> bool:
        resource, gpus, cpu, mem = SHAPES[shape]
        if resource is not None and (resource != self.gpu_resource[n] or self.free_gpu[n] < gpus):
            return False
        return self.free_cpu[n] >= cpu and self.free_mem[n] >= mem and self.free_pods[n] >= 1

    def take(self, n: int, shape: int, sign: int) -> None:
        _resource, gpus, cpu, mem = SHAPES[shape]
        self.free_gpu[n] -= sign * gpus
        self.free_cpu[n] -= sign * cpu
        self.free_mem[n] -= sign * mem
        self.free_pods[n] -= sign

    def node_name(self, n: int) -> str:
        return self.nodes[n]["metadata"]["name"]

    def pod_object(self, i: int, *, phase: str = "Running", bound: bool = True, version: int = 1) -> dict[str, Any]:
        """Pod ``i`` of the plan, as a full API object."""
        n = self.pod_node[i]
        return watch_pod(f"pod-{i}", self.pod_shape[i], self.node_name(n) if (bound and n >= 0) else None, phase=phase, version=version)

    def live_pods(self) -> Any:
        for i in range(len(self.pod_node)):
            if self.alive[i]:
                yield self.pod_object(i)


# where the hub's own server pods live in the synthetic federation
SERVER_NAMESPACE = "jupyter"


def watch_pod(
    name: str,
    shape: int,
    node_name: str | None,
    *,
    namespace: str = "research",
    phase: str = "Running",
    version: int = 1,
    site: str | None = None,
    user: str | None = None,
) -> dict[str, Any]:
    """A pod as a watch event carries it: metadata, a full container spec, status and conditions."""
    resource, gpus, cpu, mem = SHAPES[shape]
    requests: dict[str, str] = {"cpu": f"{cpu}m", "memory": f"{mem}Gi"}
    limits: dict[str, str] = {"memory": f"{mem}Gi"}
    if resource is not None:
        limits[resource] = str(gpus)
    labels = {"app": "research-job", "component": "worker", "release": "lab"}
    annotations: dict[str, str] = {"kubectl.kubernetes.io/default-container": "main"}
    if site is not None:
        labels[keys.SITE_LABEL] = site
    if user is not None:
        # a user's server as KubeSpawner writes it, in the hub's namespace
        namespace = SERVER_NAMESPACE
        labels.update({"component": "singleuser-server", "app.kubernetes.io/managed-by": "kubespawner"})
        annotations[keys.USER_ANNOTATION] = user
        annotations["hub.jupyter.org/username"] = user
        annotations["hub.jupyter.org/servername"] = ""
    spec: dict[str, Any] = {
        "containers": [
            {
                "name": "main",
                "image": "quay.io/jupyter/pytorch-notebook:cuda12-2024-10-07",
                "imagePullPolicy": "IfNotPresent",
                "args": ["start-notebook.py", "--ServerApp.port=8888"],
                "ports": [{"containerPort": 8888, "name": "notebook-port", "protocol": "TCP"}],
                "env": [{"name": f"VAR_{k}", "value": f"value-{k}"} for k in range(8)],
                "resources": {"requests": requests, "limits": limits},
                "volumeMounts": [{"mountPath": "/home/jovyan", "name": "home"}],
                "securityContext": {"runAsUser": 1000, "allowPrivilegeEscalation": False},
                "terminationMessagePath": "/dev/termination-log",
                "terminationMessagePolicy": "File",
            }
        ],
        "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": f"claim-{name}"}}],
        "restartPolicy": "OnFailure",
        "schedulerName": "default-scheduler",
        "serviceAccountName": "default",
        "terminationGracePeriodSeconds": 30,
        "tolerations": [
            {"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists", "tolerationSeconds": 300},
            {"effect": "NoExecute", "key": "node.kubernetes.io/unreachable", "operator": "Exists", "tolerationSeconds": 300},
        ],
        "priority": 0,
    }
    if node_name:
        spec["nodeName"] = node_name
    conditions = [{"type": "PodScheduled", "status": "True" if node_name else "False", "lastTransitionTime": "2026-01-12T09:00:00Z"}]
    status: dict[str, Any] = {"phase": phase, "conditions": conditions, "qosClass": "Burstable"}
    if phase == "Running":
        conditions += [
            {"type": t, "status": "True", "lastTransitionTime": "2026-01-12T09:00:05Z"} for t in ("Initialized", "ContainersReady", "Ready")
        ]
        status.update(
            hostIP="10.0.12.7",
            podIP="10.244.3.17",
            startTime="2026-01-12T09:00:01Z",
            containerStatuses=[
                {
                    "name": "main",
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "image": "quay.io/jupyter/pytorch-notebook:cuda12-2024-10-07",
                    "imageID": "quay.io/jupyter/pytorch-notebook@sha256:" + "0" * 64,
                    "containerID": "containerd://" + "a" * 64,
                    "state": {"running": {"startedAt": "2026-01-12T09:00:04Z"}},
                }
            ],
        )
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"00000000-0000-4000-8000-{abs(hash(name)) % 10**12:012d}",
            "resourceVersion": str(version),
            "creationTimestamp": "2026-01-12T09:00:00Z",
            "labels": labels,
            "annotations": annotations,
        },
        "spec": spec,
        "status": status,
    }
