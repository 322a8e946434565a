"""Many pods for ``bench hub-memory``, as a busy origin's API server would list them, run by no process.

The hub watches every pod of the cluster; what it holds depends on how many there are and on
which are its own. A mix like a university cluster's: one pod in five is one of the hub's own
GPU servers (in the users' namespace, labelled and annotated as GPUBurstSpawner and KubeSpawner
label theirs), the rest are other namespaces' workloads (system daemons, monitoring, teams'
services and jobs, one in twenty with a GPU).

Each pod is bound to a node and carries the status a kubelet writes for a running pod (phase,
conditions, IPs, container statuses), so the hub reads what it would read from a cluster where
they run. The benchmark stops the origin's process kubelet first: thousands of real processes
do not fit a laptop, and the hub only ever sees the API objects.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from collections.abc import Iterator
from typing import Any

from jupyter_gpuburst.core import keys
from jupyter_gpuburst.sim.store import Store

GPU = "nvidia.com/gpu"
USERS_NAMESPACE = "jhub-users"
OTHER_NAMESPACES = ("kube-system", "monitoring", "ingress", *(f"team-{i:02d}" for i in range(12)))
GPU_NODE_PREFIX = "origin-gpu"
CPU_NODE_PREFIX = "origin-cpu"
SERVER_EVERY = 5  # one pod in five is a hub server
OTHER_GPU_EVERY = 20  # one other pod in twenty holds a GPU


def _stamp(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _env(pairs: dict[str, str]) -> list[dict[str, str]]:
    return [{"name": k, "value": v} for k, v in pairs.items()]


def server_pod(i: int, node: str) -> dict[str, Any]:
    """The hub's own GPU server ``i``: labels, annotations and spec in KubeSpawner's shape."""
    user = f"student-{i:05d}"
    env = {
        "JUPYTERHUB_API_URL": "http://hub:8081/hub/api",
        "JUPYTERHUB_ACTIVITY_URL": f"http://hub:8081/hub/api/users/{user}/activity",
        "JUPYTERHUB_BASE_URL": "/",
        "JUPYTERHUB_CLIENT_ID": f"jupyterhub-user-{user}",
        "JUPYTERHUB_OAUTH_CALLBACK_URL": f"/user/{user}/oauth_callback",
        "JUPYTERHUB_OAUTH_SCOPES": f'["access:servers!server={user}/"]',
        "JUPYTERHUB_SERVER_NAME": "",
        "JUPYTERHUB_SERVICE_PREFIX": f"/user/{user}/",
        "JUPYTERHUB_SERVICE_URL": "http://0.0.0.0:8888/",
        "JUPYTERHUB_USER": user,
        "JUPYTER_IMAGE": "registry.example.edu/jupyter-gpuburst/singleuser:0.2.0",
        "MEM_GUARANTEE": "8589934592",
        keys.SITE_ENV: keys.ORIGIN_SITE,
        keys.CLUSTER_ENV: "origin",
        keys.REASON_ENV: "1 of 8 local GPUs free on origin-gpu-0001",
    }
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"jupyter-{user}",
            "namespace": USERS_NAMESPACE,
            "labels": {
                "app": "jupyterhub",
                "app.kubernetes.io/managed-by": "kubespawner",
                "component": "singleuser-server",
                "heritage": "jupyterhub",
                "hub.jupyter.org/network-access-hub": "true",
                "hub.jupyter.org/servername": "",
                "hub.jupyter.org/username": user,
                keys.SITE_LABEL: keys.ORIGIN_SITE,
                keys.CLUSTER_LABEL: "origin",
            },
            "annotations": {
                "hub.jupyter.org/username": user,
                "hub.jupyter.org/servername": "",
                keys.USER_ANNOTATION: user,
                keys.GROUPS_ANNOTATION: '["students", "ml-101"]',
                keys.PROFILE_ANNOTATION: "gpu1",
                keys.REASON_ANNOTATION: "1 of 8 local GPUs free on origin-gpu-0001",
            },
        },
        "spec": {
            "nodeName": node,
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "notebook",
                    "image": "registry.example.edu/jupyter-gpuburst/singleuser:0.2.0",
                    "args": ["jupyterhub-singleuser"],
                    "env": _env(env),
                    "ports": [{"containerPort": 8888, "name": "notebook-port", "protocol": "TCP"}],
                    "resources": {"limits": {GPU: "1", "memory": "16Gi"}, "requests": {GPU: "1", "cpu": "2", "memory": "8Gi"}},
                    "securityContext": {"runAsUser": 1000, "runAsGroup": 100, "allowPrivilegeEscalation": False},
                    "volumeMounts": [{"mountPath": "/home/jovyan", "name": "home"}],
                }
            ],
            "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": f"claim-{user}"}}],
            "securityContext": {"fsGroup": 100},
            "tolerations": [
                {"effect": "NoSchedule", "key": "hub.jupyter.org/dedicated", "operator": "Equal", "value": "user"},
                {"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists", "tolerationSeconds": 300},
            ],
            "restartPolicy": "OnFailure",
        },
    }


def other_pod(i: int, node: str, gpu: bool = False) -> dict[str, Any]:
    """Another namespace's workload ``i``: a Deployment's replica, with a GPU or without."""
    namespace = OTHER_NAMESPACES[i % len(OTHER_NAMESPACES)]
    app = f"app-{i % 40:02d}"
    requests: dict[str, str] = {"cpu": "250m", "memory": "512Mi"}
    if gpu:
        requests[GPU] = "1"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{app}-7d9c5b{i:06d}",
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": app, "pod-template-hash": "7d9c5b"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": f"{app}-7d9c5b", "uid": f"rs-{namespace}-{app}", "controller": True}
            ],
        },
        "spec": {
            "nodeName": node,
            "containers": [
                {
                    "name": app,
                    "image": f"registry.example.edu/{namespace}/{app}:1.4.2",
                    "env": _env({"LOG_LEVEL": "info", "PORT": "8080"}),
                    "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                    "resources": {"requests": requests, "limits": {k: v for k, v in requests.items() if k != "cpu"}},
                }
            ],
            "serviceAccountName": "default",
        },
    }


def running_status(pod: dict[str, Any], pod_ip: str, host_ip: str, started: dt.datetime) -> dict[str, Any]:
    """What a kubelet writes for ``pod`` once its containers run."""
    at = _stamp(started)
    conditions = [
        {"type": t, "status": "True", "lastTransitionTime": at} for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
    ]
    containers = [
        {
            "name": c["name"],
            "image": c["image"],
            "imageID": f"{c['image'].split(':')[0]}@sha256:{'0' * 64}",
            "containerID": f"containerd://{pod['metadata']['name']}-{c['name']}",
            "ready": True,
            "started": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": at}},
        }
        for c in pod["spec"]["containers"]
    ]
    return {
        "phase": "Running",
        "conditions": conditions,
        "hostIP": host_ip,
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": at,
        "qosClass": "Burstable",
        "containerStatuses": containers,
    }


def gpu_pods(count: int) -> int:
    """How many of ``mix(count, ...)``'s pods hold a GPU."""
    return sum(1 for i in range(count) if i % SERVER_EVERY == 0 or i % OTHER_GPU_EVERY == 1)


def mix(count: int, gpu_nodes: list[str], cpu_nodes: list[str], gpus_per_node: int) -> Iterator[dict[str, Any]]:
    """``count`` pods: every ``SERVER_EVERY``-th a hub server, some others with a GPU, each GPU
    pod on the next GPU node with a GPU free (ValueError when there are too few); the other pods
    take turns on every node."""
    every = gpu_nodes + cpu_nodes
    held = 0
    for i in range(count):
        server, gpu = i % SERVER_EVERY == 0, i % OTHER_GPU_EVERY == 1
        if server or gpu:
            if held >= gpus_per_node * len(gpu_nodes):
                raise ValueError(f"{count} pods need more than the {len(gpu_nodes)} GPU nodes' {held} GPUs")
            node = gpu_nodes[held // gpus_per_node]
            held += 1
            yield server_pod(i, node) if server else other_pod(i, node, gpu=True)
        else:
            yield other_pod(i, every[i % len(every)])


def ensure_namespaces(store: Store, names: list[str]) -> None:
    have = {ns["metadata"]["name"] for ns in store.list("namespaces")[0]}
    for name in names:
        if name not in have:
            store.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def create_running(store: Store, pods: list[dict[str, Any]], network: str = "10.244.0.0/16") -> list[tuple[str, str]]:
    """Create ``pods`` in ``store``, each with a running pod's status; returns their (namespace, name)."""
    ensure_namespaces(store, sorted({p["metadata"]["namespace"] for p in pods}))
    addresses = ipaddress.ip_network(network).hosts()
    nodes = {n["metadata"]["name"]: n for n in store.list("nodes")[0]}
    now = dt.datetime.now(dt.UTC)
    made = []
    for pod in pods:
        created = store.create("pods", pod, pod["metadata"]["namespace"])
        node = nodes[pod["spec"]["nodeName"]]
        host_ip = next(a["address"] for a in node["status"]["addresses"] if a["type"] == "InternalIP")
        created["status"] = running_status(pod, str(next(addresses)), host_ip, now)
        store.replace("pods", created, subresource="status")
        made.append((created["metadata"]["namespace"], created["metadata"]["name"]))
    return made


def delete_all(store: Store, made: list[tuple[str, str]]) -> None:
    """Delete ``made`` at once (grace 0: no kubelet is there to confirm a graceful stop)."""
    for namespace, name in made:
        store.delete("pods", namespace, name, grace_period_seconds=0)
