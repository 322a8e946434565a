"""A GPU kernel's own NetworkPolicy: the pods of its server reach its ports, no other pod does.

NetworkPolicies add up. hub_config/networkpolicy-kernels.yaml selects every kernel pod, gives it
its egress and lets nothing in; the policy the hub creates with each origin kernel's pod lets in,
on that kernel's five ports only, the pods KubeSpawner labels as the server of that user and
that name. So another student's server, or code in it, cannot even connect to a kernel's ZMQ
ports (the key is no longer all that stops it), nor can another server of the same student. A
pre-started kernel waiting in its pool has no policy of its own: nothing reaches it until a
request adopts it, and the adoption creates it.

The policy is owned by the kernel's pod, in the same namespace, so Kubernetes' garbage collector
removes it with the pod, whoever deletes the pod. It is created after the pod (the owner
reference needs the pod's uid); until then the kernel is unreachable, and the hub reports the
kernel running only after it. A donor kernel gets none: Liqo does not reflect NetworkPolicies,
and on the origin its pod is the shadow of the one the donor runs (docs/security.md says what
the donor's admin applies there).
"""

from __future__ import annotations

from typing import Any

from kubespawner.slugs import is_valid_label, safe_slug

from jupyter_gpuburst.core import keys

# KubeSpawner's labels on a user's server pod (KubeSpawner._build_pod_labels, whose
# component_label z2jh keeps at its default): each value escaped as KubeSpawner escapes it
SERVER_COMPONENT = "singleuser-server"
USERNAME_LABEL = "hub.jupyter.org/username"
SERVERNAME_LABEL = "hub.jupyter.org/servername"


def server_labels(user: str, server_name: str) -> dict[str, str]:
    """The labels that select the pod of ``user``'s server ``server_name`` ("" the default one)
    and no other: KubeSpawner's escaping of a name is unique (an invalid one is hashed)."""
    return {
        keys.COMPONENT_LABEL: SERVER_COMPONENT,
        USERNAME_LABEL: safe_slug(user, is_valid=is_valid_label),
        SERVERNAME_LABEL: safe_slug(server_name, is_valid=is_valid_label),
    }


def kernel_policy(
    *, pod_name: str, namespace: str, pod_uid: str, record_id: str, user: str, server_name: str, ports: dict[str, int]
) -> dict[str, Any]:
    """The NetworkPolicy of the kernel ``record_id`` (its pod ``pod_name``, named alike): its
    server's pods in, on its ports (``{"shell_port": 50000, ...}``), and no one else."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": pod_name,
            "namespace": namespace,
            "labels": {keys.COMPONENT_LABEL: keys.KERNEL_COMPONENT},
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Pod", "name": pod_name, "uid": pod_uid, "blockOwnerDeletion": False},
            ],
        },
        "spec": {
            "podSelector": {"matchLabels": {keys.COMPONENT_LABEL: keys.KERNEL_COMPONENT, keys.KERNEL_LABEL: record_id}},
            "policyTypes": ["Ingress"],
            "ingress": [
                {
                    "ports": [{"port": port, "protocol": "TCP"} for port in sorted(ports.values())],
                    "from": [{"podSelector": {"matchLabels": server_labels(user, server_name)}}],
                }
            ],
        },
    }


async def admit_server(networking_api: Any, record: Any, pod_uid: str) -> None:
    """Create the policy that lets ``record``'s server into its kernel's pod (an origin kernel's)."""
    policy = kernel_policy(
        pod_name=record.pod_name,
        namespace=record.namespace,
        pod_uid=pod_uid,
        record_id=record.id,
        user=record.user,
        server_name=record.server_name,
        ports=record.ports,
    )
    await networking_api.create_namespaced_network_policy(record.namespace, policy)
