"""The Service and EndpointSlice of the hub's address in the user namespace (pure)."""

from __future__ import annotations

from typing import Any

from jupyter_gpuburst.core.keys import GROUP

Obj = dict[str, Any]
SERVICE_NAME_LABEL = "kubernetes.io/service-name"
# kube-controller-manager's endpointslice controllers leave slices managed by another alone
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
MANAGER = GROUP


COMPONENT = "hub-address"
# what `gpuburst uninstall` finds the Service and its EndpointSlice by
SELECTOR = f"app.kubernetes.io/component={COMPONENT}"


def _labels(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": name, "app.kubernetes.io/component": COMPONENT, "app.kubernetes.io/managed-by": MANAGER}


def service(name: str, namespace: str, ports: dict[str, int]) -> Obj:
    """A Service without a selector: its endpoints are the EndpointSlice below, not pods of its
    namespace (the hub's pod lives in another)."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": _labels(name)},
        "spec": {
            "type": "ClusterIP",
            "ports": [
                {"name": port_name, "port": port, "targetPort": port, "protocol": "TCP"} for port_name, port in sorted(ports.items())
            ],
        },
    }


def endpoint_slice(name: str, namespace: str, ip: str, ports: dict[str, int]) -> Obj:
    """The Service's one endpoint: the hub pod at ``ip`` (no nodeName: the hub's node is the
    origin's, never a virtual node, and Liqo reflects every endpoint not on one)."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {**_labels(name), SERVICE_NAME_LABEL: name, MANAGED_BY_LABEL: MANAGER},
        },
        "addressType": "IPv6" if ":" in ip else "IPv4",
        "endpoints": [{"addresses": [ip], "conditions": {"ready": True}}],
        "ports": [{"name": port_name, "port": port, "protocol": "TCP"} for port_name, port in sorted(ports.items())],
    }
