"""Every Liqo fact the product relies on, in one place.

Taken from Liqo's own source and CRDs (offloading.liqo.io/v1beta1). No other module spells a
``liqo.io`` key: they import the names below, so a Liqo rename is a one-file change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# A peered donor cluster shows up in the origin as a Node carrying these labels.
TYPE_LABEL = "liqo.io/type"
VIRTUAL_NODE_TYPE = "virtual-node"
REMOTE_CLUSTER_ID_LABEL = "liqo.io/remote-cluster-id"

# Liqo taints every virtual node so that only pods that opt in (offloaded namespaces,
# or an explicit toleration) land there.
VIRTUAL_NODE_TAINT_KEY = "virtual-node.liqo.io/not-allowed"
VIRTUAL_NODE_TAINT_VALUE = "true"
VIRTUAL_NODE_TAINT_EFFECT = "NoExecute"
VIRTUAL_NODE_TAINT: Mapping[str, str] = {
    "key": VIRTUAL_NODE_TAINT_KEY,
    "value": VIRTUAL_NODE_TAINT_VALUE,
    "effect": VIRTUAL_NODE_TAINT_EFFECT,
}

OFFLOADING_GROUP = "offloading.liqo.io"
OFFLOADING_VERSION = "v1beta1"
OFFLOADING_API_VERSION = f"{OFFLOADING_GROUP}/{OFFLOADING_VERSION}"
NAMESPACE_OFFLOADING_KIND = "NamespaceOffloading"
NAMESPACE_OFFLOADING_PLURAL = "namespaceoffloadings"
# Liqo only honours the NamespaceOffloading with this exact name in a namespace.
NAMESPACE_OFFLOADING_NAME = "offloading"
VIRTUAL_NODE_KIND = "VirtualNode"
# a virtual kubelet's settings, its reflectors' policies among them (spec.reflectorsConfig)
VK_OPTIONS_TEMPLATE_KIND = "VkOptionsTemplate"
VK_OPTIONS_TEMPLATE_PLURAL = "vkoptionstemplates"
VIRTUAL_NODE_PLURAL = "virtualnodes"

# Liqo's virtual storage class: a claim of this class is provisioned on the site where its first
# pod lands (the origin's real class, or the donor's through reflection) and pins later pods
# there. Claims of any other class are not reflected: a donor pod mounting one stays Pending.
VIRTUAL_STORAGE_CLASS = "liqo"
STORAGE_PROVISIONER = "liqo.io/storage"

# Objects Liqo's virtual kubelet reflects into a remote namespace carry these labels (forge
# ReflectionLabels). Under the DenyList reflection policy (Liqo's default) every ConfigMap and
# Secret of an offloaded namespace is reflected to every donor it is offloaded to, but for those
# annotated to skip it; under AllowList only those annotated to allow it are (consts).
REFLECTION_ORIGIN_LABEL = "offloading.liqo.io/origin"
REFLECTION_DESTINATION_LABEL = "offloading.liqo.io/destination"
# An offloaded pod: the origin's is labelled as Liqo's (consts.LocalPodLabelKey), and the donor's
# twin, made by Liqo's ShadowPod controller, carries the origin pod's labels and these
# (forge.RemoteShadowPod, the controller's managed-by label), as Liqo's own virtual kubelet shows
# (tests/kube/test_liqo_virtual_kubelet.py)
OFFLOADED_POD_LABEL = "liqo.io/shadowPod"
REMOTE_POD_NODE_LABEL = "offloading.liqo.io/nodename"
MANAGED_BY_LABEL = "liqo.io/managed-by"
MANAGED_BY_SHADOWPOD = "shadowpod"
SKIP_REFLECTION_ANNOTATION = "liqo.io/skip-reflection"
ALLOW_REFLECTION_ANNOTATION = "liqo.io/allow-reflection"
# the manager of EndpointSlices Liqo reflects (forge.EndpointSliceManagedBy): the donor's own
# endpointslice controllers leave them alone
ENDPOINTSLICE_MANAGED_BY = "endpointslice.reflection.liqo.io"
REFLECTION_POLICIES = ("DenyList", "AllowList")
DEFAULT_REFLECTION_POLICY = "DenyList"

INSTALL_DOCS_URL = "https://docs.liqo.io/en/stable/installation/install.html"

POD_OFFLOADING_STRATEGIES = ("Local", "Remote", "LocalAndRemote")
NAMESPACE_MAPPING_STRATEGIES = ("DefaultName", "EnforceSameName", "SelectedName")


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def is_virtual_node(node: Mapping[str, Any]) -> bool:
    """True when ``node`` is a Liqo virtual node (a peered donor cluster)."""
    return _labels(node).get(TYPE_LABEL) == VIRTUAL_NODE_TYPE


def remote_cluster_id(node: Mapping[str, Any]) -> str | None:
    """The donor cluster id behind a virtual node, or None for an ordinary node."""
    if not is_virtual_node(node):
        return None
    return _labels(node).get(REMOTE_CLUSTER_ID_LABEL) or None


def is_virtual_node_taint(taint: Mapping[str, Any]) -> bool:
    """True for the taint Liqo puts on every virtual node (any effect Liqo may use)."""
    return taint.get("key") == VIRTUAL_NODE_TAINT_KEY


def virtual_node_labels(cluster_id: str) -> dict[str, str]:
    """Labels Liqo sets on the virtual node of donor ``cluster_id``."""
    return {TYPE_LABEL: VIRTUAL_NODE_TYPE, REMOTE_CLUSTER_ID_LABEL: cluster_id}


def virtual_node_taint() -> dict[str, str]:
    return dict(VIRTUAL_NODE_TAINT)


def virtual_node_toleration() -> dict[str, str]:
    """Toleration a pod needs to be scheduled on (and stay on) a virtual node."""
    return {
        "key": VIRTUAL_NODE_TAINT_KEY,
        "operator": "Equal",
        "value": VIRTUAL_NODE_TAINT_VALUE,
        "effect": VIRTUAL_NODE_TAINT_EFFECT,
    }


def local_node_affinity_term() -> dict[str, Any]:
    """A node selector term matching every node that is not a Liqo virtual node.

    NotIn (rather than DoesNotExist) still matches nodes without the label at all, and does not
    exclude nodes that some other tool labels with ``liqo.io/type`` for its own reasons.
    """
    return {
        "matchExpressions": [
            {"key": TYPE_LABEL, "operator": "NotIn", "values": [VIRTUAL_NODE_TYPE]},
        ]
    }


def donor_node_affinity_term(cluster_id: str) -> dict[str, Any]:
    """A node selector term matching only the virtual node of donor ``cluster_id``."""
    if not cluster_id:
        raise ValueError("donor cluster id must be a non-empty string")
    return {
        "matchExpressions": [
            {"key": TYPE_LABEL, "operator": "In", "values": [VIRTUAL_NODE_TYPE]},
            {"key": REMOTE_CLUSTER_ID_LABEL, "operator": "In", "values": [cluster_id]},
        ]
    }


def namespace_offloading(
    namespace: str,
    strategy: str = "LocalAndRemote",
    cluster_ids: Iterable[str] | None = None,
    namespace_mapping_strategy: str = "DefaultName",
) -> dict[str, Any]:
    """The NamespaceOffloading that lets pods of ``namespace`` reach virtual nodes.

    ``cluster_ids`` restricts offloading to those donors (a clusterSelector over virtual-node
    labels); None means every peered donor.
    """
    if strategy not in POD_OFFLOADING_STRATEGIES:
        raise ValueError(f"unknown podOffloadingStrategy {strategy!r}; expected one of {', '.join(POD_OFFLOADING_STRATEGIES)}")
    if namespace_mapping_strategy not in NAMESPACE_MAPPING_STRATEGIES:
        raise ValueError(
            f"unknown namespaceMappingStrategy {namespace_mapping_strategy!r}; expected one of {', '.join(NAMESPACE_MAPPING_STRATEGIES)}"
        )
    if not namespace:
        raise ValueError("namespace must be a non-empty string")
    spec: dict[str, Any] = {
        "podOffloadingStrategy": strategy,
        "namespaceMappingStrategy": namespace_mapping_strategy,
    }
    if cluster_ids is not None:
        ids = sorted(set(cluster_ids))
        if not ids:
            raise ValueError("cluster_ids, when given, must name at least one donor cluster")
        spec["clusterSelector"] = {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": TYPE_LABEL, "operator": "In", "values": [VIRTUAL_NODE_TYPE]},
                        {"key": REMOTE_CLUSTER_ID_LABEL, "operator": "In", "values": ids},
                    ]
                }
            ]
        }
    return {
        "apiVersion": OFFLOADING_API_VERSION,
        "kind": NAMESPACE_OFFLOADING_KIND,
        "metadata": {"name": NAMESPACE_OFFLOADING_NAME, "namespace": namespace},
        "spec": spec,
    }


def remote_namespace_name(namespace: str, origin_cluster_id: str) -> str:
    """Name of the donor-side namespace under Liqo's DefaultName mapping strategy."""
    return f"{namespace}-{origin_cluster_id}"
