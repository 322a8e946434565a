"""Liqo's reflection of ConfigMaps, Secrets, Services and EndpointSlices from an offloaded
namespace to its remote namespace.

As Liqo's virtual kubelet reflectors do (pkg/virtualKubelet/reflection/configuration): every
ConfigMap and Secret of an offloaded namespace has a copy in the remote namespace, labelled with
the origin and destination cluster ids; a change of the origin object is applied to the copy;
when the origin object goes (deleted, or collected with its owner), the copy is deleted. A
remote object that is not labelled as reflected is someone else's and left alone. Not reflected:
Secrets holding service-account tokens (a dedicated reflector's job, off by default) and objects
annotated to skip it (``liqo.SKIP_REFLECTION_ANNOTATION``), under Liqo's default DenyList
policy; under AllowList (``secret_policy``, Liqo's ``offloading.reflection.secret.type``) a
Secret is reflected only when annotated to allow it (``liqo.ALLOW_REFLECTION_ANNOTATION``).
The origin's ``kube-root-ca.crt`` is reflected under a name of its own, so as not to collide with
the donor's: ``root_ca_remote_name``.

Services and EndpointSlices (Liqo's exposition reflectors) keep their names, so a Service's short
name resolves on the donor as on the origin, and only from offloaded namespaces: the donor never
learns a Service of a namespace that is not offloaded. A Service's copy has its ports and
selector, not its ClusterIP (the donor allocates its own); an EndpointSlice's copy drops the
endpoints on a virtual node (pods the donor runs itself) and keeps the others' addresses, which
Liqo remaps into the range the donor routes to the origin and which the emulator's pods reach as
they are (one host).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.store import Store

log = logging.getLogger(__name__)
Obj = dict[str, Any]

ORIGIN_LABEL = liqo.REFLECTION_ORIGIN_LABEL
DESTINATION_LABEL = liqo.REFLECTION_DESTINATION_LABEL
SKIP_ANNOTATION = liqo.SKIP_REFLECTION_ANNOTATION
ROOT_CA = "kube-root-ca.crt"
ENDPOINTSLICES = "endpointslices.discovery.k8s.io"
MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
REFLECTED_TYPES = ("configmaps", "secrets", "services", ENDPOINTSLICES)
KINDS = {
    "configmaps": ("v1", "ConfigMap"),
    "secrets": ("v1", "Secret"),
    "services": ("v1", "Service"),
    ENDPOINTSLICES: ("discovery.k8s.io/v1", "EndpointSlice"),
}
# what a copy carries besides its metadata; a change in any of them is applied to the copy
CONTENT = {
    "configmaps": ("data", "binaryData", "immutable"),
    "secrets": ("data", "binaryData", "immutable", "type"),
    "services": ("spec",),
    ENDPOINTSLICES: ("addressType", "endpoints", "ports"),
}


def root_ca_remote_name(origin_id: str) -> str:
    """The name of the origin's root CA ConfigMap on the donor, as Liqo forges it
    (forge.RemoteConfigMapName): the first five characters of the origin's cluster id after a
    dot, and an ``a`` after them where they end in a character a name may not end in. Seen
    from Liqo's own virtual kubelet: ``kube-root-ca.crt.origi`` for the origin ``origin``
    (tests/kube/test_liqo_virtual_kubelet.py)."""
    name = f"{ROOT_CA}.{origin_id[:5]}"
    return name if name[-1].isascii() and name[-1].isalnum() else f"{name}a"


class ConfigurationReflector:
    """Keeps the donor's copies of one origin's reflected objects in offloaded namespaces.

    ``remote_namespace(ns)`` is the namespace's remote name when ``ns`` is offloaded to this
    donor, else None.
    """

    def __init__(
        self,
        origin: Store,
        donor: Store,
        origin_id: str,
        donor_id: str,
        remote_namespace: Callable[[str], str | None],
        secret_policy: str = liqo.DEFAULT_REFLECTION_POLICY,
    ):
        if secret_policy not in liqo.REFLECTION_POLICIES:
            raise ValueError(f"unknown reflection policy {secret_policy!r}; expected one of {', '.join(liqo.REFLECTION_POLICIES)}")
        self.secret_policy = secret_policy
        self.origin = origin
        self.donor = donor
        self.labels = {ORIGIN_LABEL: origin_id, DESTINATION_LABEL: donor_id}
        self.origin_id = origin_id
        self.remote_namespace = remote_namespace
        self._virtual_nodes: set[str] = set()

    def remote_name(self, rtype: str, name: str) -> str:
        return root_ca_remote_name(self.origin_id) if rtype == "configmaps" and name == ROOT_CA else name

    def reflected(self, obj: Obj) -> bool:
        labels = obj["metadata"].get("labels") or {}
        return all(labels.get(k) == v for k, v in self.labels.items())

    def _skipped(self, rtype: str, obj: Obj) -> bool:
        annotations = obj["metadata"].get("annotations") or {}
        if rtype == "secrets" and self.secret_policy == "AllowList":
            return annotations.get(liqo.ALLOW_REFLECTION_ANNOTATION, "").lower() != "true"
        if annotations.get(SKIP_ANNOTATION, "").lower() == "true":
            return True
        if rtype in ("services", ENDPOINTSLICES) and obj["metadata"]["namespace"] == "default":
            return obj["metadata"]["name"] == "kubernetes"  # the API server's own, meaningless there
        return rtype == "secrets" and obj.get("type") == "kubernetes.io/service-account-token"

    def _on_virtual_node(self, endpoint: Obj) -> bool:
        node = endpoint.get("nodeName")
        if not node:
            return False
        if node not in self._virtual_nodes:
            try:
                if not liqo.is_virtual_node(self.origin.get("nodes", None, node)):
                    return False
            except ApiError:
                return False
            self._virtual_nodes.add(node)
        return True

    @staticmethod
    def _own_labels(rtype: str) -> dict[str, str]:
        return {MANAGED_BY_LABEL: liqo.ENDPOINTSLICE_MANAGED_BY} if rtype == ENDPOINTSLICES else {}

    def _content(self, rtype: str, obj: Obj) -> Obj:
        if rtype == "services":
            spec = _without_cluster_ip(obj)
            return {"spec": spec}
        if rtype == ENDPOINTSLICES:
            endpoints = [{**e, "nodeName": self.origin_id} for e in obj.get("endpoints") or [] if not self._on_virtual_node(e)]
            return {"addressType": obj.get("addressType", "IPv4"), "endpoints": endpoints, "ports": obj.get("ports") or []}
        return {k: obj[k] for k in CONTENT[rtype] if k in obj}

    def twin(self, rtype: str, obj: Obj, remote_ns: str) -> Obj:
        meta = obj["metadata"]
        api_version, kind = KINDS[rtype]
        out: Obj = {
            "apiVersion": api_version,
            "kind": kind,
            "metadata": {
                "name": self.remote_name(rtype, meta["name"]),
                "namespace": remote_ns,
                "labels": {**(meta.get("labels") or {}), **self.labels, **self._own_labels(rtype)},
                "annotations": dict(meta.get("annotations") or {}),
            },
        }
        out.update(self._content(rtype, obj))
        return out

    def reflect(self, rtype: str, obj: Obj) -> None:
        """Create or update the copy of ``obj`` (or delete it, when the object is now skipped)."""
        remote_ns = self.remote_namespace(obj["metadata"]["namespace"])
        if remote_ns is None:
            return
        if self._skipped(rtype, obj):
            self.unreflect(rtype, obj["metadata"]["namespace"], obj["metadata"]["name"])
            return
        twin = self.twin(rtype, obj, remote_ns)
        try:
            current = self.donor.get(rtype, remote_ns, twin["metadata"]["name"])
        except ApiError:
            current = None
        try:
            if current is None:
                self.donor.create(rtype, twin, remote_ns)
            elif self.reflected(current):
                twin["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                if (
                    any(self._differs(rtype, k, current, twin) for k in CONTENT[rtype])
                    or current["metadata"].get("labels") != twin["metadata"]["labels"]
                    or (current["metadata"].get("annotations") or {}) != twin["metadata"]["annotations"]
                ):
                    self.donor.replace(rtype, twin)
            else:
                log.info(
                    "not reflecting %s %s/%s: the remote object exists and is not reflected", rtype, remote_ns, twin["metadata"]["name"]
                )
        except ApiError as exc:
            if exc.code != 409:
                log.warning("reflecting %s %s/%s failed: %s", rtype, obj["metadata"]["namespace"], obj["metadata"]["name"], exc.message)

    @staticmethod
    def _differs(rtype: str, key: str, current: Obj, twin: Obj) -> bool:
        if rtype == "services":  # the donor's API server gave the copy its own ClusterIP
            spec = _without_cluster_ip(current)
            return spec != twin["spec"]
        return current.get(key) != twin.get(key)

    def unreflect(self, rtype: str, namespace: str, name: str) -> None:
        """Delete the copy of the origin object ``namespace/name``, if there is one of ours."""
        remote_ns = self.remote_namespace(namespace)
        if remote_ns is None:
            return
        remote_name = self.remote_name(rtype, name)
        try:
            current = self.donor.get(rtype, remote_ns, remote_name)
            if self.reflected(current):
                self.donor.delete(rtype, remote_ns, remote_name)
        except ApiError:
            pass  # gone already

    def reflect_namespace(self, namespace: str) -> None:
        """Every reflected object of a namespace that has just been offloaded."""
        for rtype in REFLECTED_TYPES:
            items, _ = self.origin.list(rtype, namespace)
            for obj in items:
                self.reflect(rtype, obj)

    async def run(self, rtype: str) -> None:
        """Follow the origin's objects of ``rtype`` until cancelled."""
        watch = self.origin.watch(rtype)
        try:
            async for etype, obj in watch:
                if etype == "DELETED":
                    self.unreflect(rtype, obj["metadata"]["namespace"], obj["metadata"]["name"])
                elif etype in ("ADDED", "MODIFIED"):
                    self.reflect(rtype, obj)
        finally:
            watch.close()


def _without_cluster_ip(svc: Obj) -> Obj:
    """A Service's spec as Liqo reflects it: the donor allocates its own ClusterIP, and a headless
    Service (ClusterIP None) stays headless."""
    spec = dict(svc.get("spec") or {})
    if spec.get("clusterIP") != "None":
        spec.pop("clusterIP", None)
        spec.pop("clusterIPs", None)
    return spec
