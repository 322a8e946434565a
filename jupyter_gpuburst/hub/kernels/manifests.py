"""A GPU kernel's pod and the Secret that carries its connection key (plain dicts, no I/O).

The key never appears in the pod spec: the pod reads it from the Secret through a
``secretKeyRef``, so ``kubectl get pod -o yaml``, events and the hub's API show only the
Secret's name. The Secret is owned by the pod and the pod by the user's server pod, so
Kubernetes' garbage collector removes both when the server goes.

Liqo reflects every Secret of an offloaded namespace to every donor that namespace is offloaded
to, unless the Secret is annotated to skip it. So a kernel on the origin keeps its Secret in the
server's namespace, marked never to be reflected; a kernel on a donor lives, with its Secret, in
a namespace of that donor's own (``kernel_namespace``), offloaded to that donor only: its key
reaches the one cluster its pod runs on, and no other donor. A donor kernel is not owned by its
server's pod (Kubernetes ignores an owner in another namespace and collects the dependent at
once): the hub stops it with its server, as it stops every kernel.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from jupyter_gpuburst import __version__
from jupyter_gpuburst.core import keys, liqo, release
from jupyter_gpuburst.core.placement import Placement
from jupyter_gpuburst.hub.kernels.files import SCRATCH_PATH, KernelFiles
from jupyter_gpuburst.hub.kernels.resources import pod_resources
from jupyter_gpuburst.hub.kernels.settings import CHANNELS, KernelProfile

CONNECTION_KEY = "connection.json"
CONNECTION_ENV = keys.KERNEL_CONNECTION_ENV
NOTE_ENV = keys.KERNEL_NOTE_ENV
FILES_ENV = keys.KERNEL_FILES_ENV
SCRATCH_ENV = keys.KERNEL_SCRATCH_ENV
KERNEL_ENTRY = ["python", "-m", "jupyter_gpuburst.kernel.pod"]
PORTS_ANNOTATION = keys.PORTS_ANNOTATION
CONTAINER = "kernel"
# Kubernetes' "restricted" Pod Security Standard: a student's code in a GPU kernel runs with no
# more privilege than the standard allows anywhere (user servers get z2jh's non-root default)
CONTAINER_SECURITY: dict[str, Any] = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}


def pod_security(uid: int | None, gid: int | None, fs_gid: int | None = None) -> dict[str, Any]:
    """The pod's securityContext: never root (an image whose user is root fails to start), the
    runtime's default seccomp profile, and the uid, gid and fsGroup the servers run with, where
    set (unset: the image's, as for the servers)."""
    context: dict[str, Any] = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    for field, value in (("runAsUser", uid), ("runAsGroup", gid), ("fsGroup", fs_gid)):
        if value is not None:
            context[field] = value
    return context


NAMESPACE_MAX = 63  # a namespace name is a DNS label


def kernel_namespace(server_namespace: str, placement: Placement) -> str:
    """Where a kernel placed at ``placement`` runs, its server being in ``server_namespace``: that
    namespace on the origin; on a donor, the namespace of that donor's kernels alone."""
    if not placement.is_donor:
        return server_namespace
    return donor_kernel_namespace(server_namespace, placement.cluster_id or placement.site)


def donor_kernel_namespace(server_namespace: str, cluster_id: str) -> str:
    """The namespace of the GPU kernels on donor ``cluster_id`` of servers in ``server_namespace``."""
    name = f"{server_namespace}{keys.KERNEL_NAMESPACE_INFIX}{cluster_id}"
    if len(name) > NAMESPACE_MAX:
        raise ValueError(
            f"the namespace for GPU kernels on donor {cluster_id}, {name!r}, is longer than "
            f"{NAMESPACE_MAX} characters: use a shorter user namespace"
        )
    return name


def reflection_annotations(placement: Placement) -> dict[str, str]:
    """A kernel Secret's word to Liqo: never reflected from the origin; reflected (under the
    AllowList policy as well) from a donor kernel's namespace, offloaded to that donor only."""
    if placement.is_donor:
        return {liqo.ALLOW_REFLECTION_ANNOTATION: "true"}
    return {liqo.SKIP_REFLECTION_ANNOTATION: "true"}


def kernel_labels(placement: Placement, record_id: str = "") -> dict[str, str]:
    """What the kernels' NetworkPolicies (hub_config/networkpolicy-kernels.yaml for all, and each
    kernel's own, ``ingress.kernel_policy``, by the kernel's id) and the hub select on."""
    labels = {keys.COMPONENT_LABEL: keys.KERNEL_COMPONENT, keys.VERSION_LABEL: release.label_value(__version__), **placement.labels()}
    if record_id:
        labels[keys.KERNEL_LABEL] = record_id
    return labels


def connection_secret(
    name: str, namespace: str, key: str, signature_scheme: str, ports: dict[str, int], placement: Placement
) -> dict[str, Any]:
    """The kernel's connection file, with its key; the kernel binds every interface of its pod.
    Reflected by Liqo only from a donor kernel's own namespace (``reflection_annotations``)."""
    connection = {
        "transport": "tcp",
        "ip": "0.0.0.0",
        "key": key,
        "signature_scheme": signature_scheme,
        **ports,
    }
    encoded = base64.b64encode(json.dumps(connection).encode()).decode()
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {keys.COMPONENT_LABEL: keys.KERNEL_COMPONENT},
            "annotations": reflection_annotations(placement),
        },
        "type": "Opaque",
        "data": {CONNECTION_KEY: encoded},
    }


def owner_reference(kind: str, name: str, uid: str, api_version: str = "v1") -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": kind, "name": name, "uid": uid, "blockOwnerDeletion": False}


def kernel_pod(
    *,
    name: str,
    namespace: str,
    record_id: str,
    user: str,
    groups: list[str],
    server_name: str,
    profile: KernelProfile,
    placement: Placement,
    attempts: int,
    image: str,
    ports: dict[str, int],
    files: KernelFiles,
    note: str,
    secret_name: str,
    server_pod: dict[str, Any] | None,
    grace_seconds: int,
    extra_env: dict[str, str] | None = None,
    command: list[str] | None = None,
    uid: int | None = None,
    gid: int | None = None,
    fs_gid: int | None = None,
    kernel_id: str = "",
) -> dict[str, Any]:
    """The kernel pod, pinned to ``placement`` exactly like a GPU server's pod."""
    env: list[dict[str, Any]] = [
        {"name": keys.SITE_ENV, "value": placement.site},
        {"name": keys.CLUSTER_ENV, "value": placement.cluster_id or ""},
        {"name": keys.REASON_ENV, "value": placement.reason},
        {"name": keys.GPU_RESOURCE_ENV, "value": placement.resource},
        {"name": keys.GPU_COUNT_ENV, "value": str(placement.count)},
        {"name": keys.NODE_ENV, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        {"name": FILES_ENV, "value": files.mode},
        {"name": SCRATCH_ENV, "value": SCRATCH_PATH if files.mode == "scratch" else ""},
        {"name": NOTE_ENV, "value": note},
        {"name": "JUPYTERHUB_USER", "value": user},
        {"name": CONNECTION_ENV, "valueFrom": {"secretKeyRef": {"name": secret_name, "key": CONNECTION_KEY}}},
    ]
    env += [{"name": k, "value": v} for k, v in sorted((extra_env or {}).items())]
    requests, limits = pod_resources(profile)
    requests[placement.resource] = limits[placement.resource] = str(placement.count)
    container: dict[str, Any] = {
        "name": CONTAINER,
        "image": image,
        "command": list(command or KERNEL_ENTRY),
        "env": env,
        "ports": [{"name": channel, "containerPort": ports[f"{channel}_port"], "protocol": "TCP"} for channel in CHANNELS],
        # ready once the kernel listens: the server connects only then
        "readinessProbe": {"tcpSocket": {"port": "hb"}, "periodSeconds": 1, "failureThreshold": 600},
        "resources": {"limits": limits, "requests": requests},
        "volumeMounts": list(files.volume_mounts),
        "securityContext": CONTAINER_SECURITY,
    }
    if files.working_dir:
        container["workingDir"] = files.working_dir
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "terminationGracePeriodSeconds": grace_seconds,
        "affinity": {"nodeAffinity": placement.node_affinity()},
        "tolerations": placement.tolerations(),
        "containers": [container],
        "volumes": list(files.volumes),
    }
    spec["securityContext"] = pod_security(uid, gid, fs_gid)
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": kernel_labels(placement, record_id),
        "annotations": {
            keys.REASON_ANNOTATION: placement.reason,
            keys.USER_ANNOTATION: user,
            keys.GROUPS_ANNOTATION: json.dumps(sorted(groups)),
            keys.ATTEMPTS_ANNOTATION: str(attempts),
            keys.KERNEL_ANNOTATION: record_id,
            keys.SERVER_ANNOTATION: server_name,
            keys.PROFILE_ANNOTATION: profile.slug,
            keys.FILES_ANNOTATION: files.mode,
            PORTS_ANNOTATION: json.dumps(ports, sort_keys=True),
        },
    }
    if kernel_id:
        metadata["annotations"][keys.JUPYTER_KERNEL_ANNOTATION] = kernel_id
    owner = server_owner(server_pod, namespace)
    if owner:
        metadata["ownerReferences"] = owner
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def server_owner(server_pod: dict[str, Any] | None, namespace: str) -> list[dict[str, Any]]:
    """The owner reference to the user's server pod for a kernel pod in ``namespace``; none for
    a pod in another namespace (a donor kernel's), whose owner Kubernetes would take for gone."""
    server_meta = (server_pod or {}).get("metadata") or {}
    if not server_meta.get("uid") or server_meta.get("namespace", namespace) != namespace:
        return []
    return [owner_reference("Pod", server_meta["name"], server_meta["uid"])]
