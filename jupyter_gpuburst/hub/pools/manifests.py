"""A warm pool's placeholder pod and its PriorityClass (plain dicts, no I/O)."""

from __future__ import annotations

from typing import Any

from jupyter_gpuburst.core import keys, liqo
from jupyter_gpuburst.hub.kernels.manifests import CONTAINER_SECURITY, pod_security
from jupyter_gpuburst.hub.pools.settings import Pool, Shape, pool_labels
from jupyter_gpuburst.hub.pools.stale import stamp

PLACEHOLDER = "placeholder"
# the image's own shell tools: a placeholder only has to stay up until it is preempted
COMMAND = ["sleep", "infinity"]
JOVYAN_UID, USERS_GID = 1000, 100  # the Jupyter images' user, as kernel pods run


NAME_PREFIX = "gpuburst-pool-"  # every placeholder's name starts so


def priority_class(name: str, value: int) -> dict[str, Any]:
    """Below every user pod; a placeholder never preempts anything itself."""
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name, "labels": {keys.COMPONENT_LABEL: keys.POOL_COMPONENT}},
        "value": value,
        "globalDefault": False,
        "preemptionPolicy": "Never",
        "description": "jupyter-gpuburst warm pool placeholders: any user server or GPU kernel preempts them.",
    }


def site_affinity(site: str) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """(nodeAffinity, tolerations) pinning a pod to ``site``, as a placed server is pinned."""
    if site == keys.ORIGIN_SITE:
        term, tolerations = liqo.local_node_affinity_term(), []
    else:
        term, tolerations = liqo.donor_node_affinity_term(site), [liqo.virtual_node_toleration()]
    return {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}, tolerations


def placeholder_pod(pool: Pool, shape: Shape, namespace: str, priority_class_name: str) -> dict[str, Any]:
    """One placeholder of ``pool``: the profile's size and image, the restricted Pod Security
    Standard, no service account token, gone at once when preempted (grace period 0)."""
    affinity, tolerations = site_affinity(pool.site)
    container = {
        "name": PLACEHOLDER,
        "image": shape.image,
        "imagePullPolicy": "IfNotPresent",
        "command": list(COMMAND),
        "resources": {"requests": dict(shape.requests), "limits": dict(shape.limits)},
        "securityContext": CONTAINER_SECURITY,
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{NAME_PREFIX}{pool.site}-{pool.profile}-"[:58],
            "namespace": namespace,
            "labels": pool_labels(pool),
        },
        "spec": {
            "priorityClassName": priority_class_name,
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "affinity": {"nodeAffinity": affinity},
            "tolerations": tolerations,
            "securityContext": pod_security(JOVYAN_UID, USERS_GID, USERS_GID),
            "containers": [container],
        },
    }
    return stamp(pod, shape.image)
