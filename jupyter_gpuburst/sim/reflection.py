"""Liqo's reflection of ConfigMaps and Secrets from an offloaded namespace to its remote namespace.

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
the donor's.
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
REFLECTED_TYPES = ("configmaps", "secrets")


class ConfigurationReflector:
    """Keeps the donor's copies of one origin's ConfigMaps and Secrets in offloaded namespaces.

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

    def remote_name(self, rtype: str, name: str) -> str:
        return f"{ROOT_CA}.{self.origin_id}" if rtype == "configmaps" and name == ROOT_CA else name

    def reflected(self, obj: Obj) -> bool:
        labels = obj["metadata"].get("labels") or {}
        return all(labels.get(k) == v for k, v in self.labels.items())

    def _skipped(self, rtype: str, obj: Obj) -> bool:
        annotations = obj["metadata"].get("annotations") or {}
        if rtype == "secrets" and self.secret_policy == "AllowList":
            return annotations.get(liqo.ALLOW_REFLECTION_ANNOTATION, "").lower() != "true"
        if annotations.get(SKIP_ANNOTATION, "").lower() == "true":
            return True
        return rtype == "secrets" and obj.get("type") == "kubernetes.io/service-account-token"

    def twin(self, rtype: str, obj: Obj, remote_ns: str) -> Obj:
        meta = obj["metadata"]
        out: Obj = {
            "apiVersion": "v1",
            "kind": "ConfigMap" if rtype == "configmaps" else "Secret",
            "metadata": {
                "name": self.remote_name(rtype, meta["name"]),
                "namespace": remote_ns,
                "labels": {**(meta.get("labels") or {}), **self.labels},
                "annotations": dict(meta.get("annotations") or {}),
            },
        }
        for key in ("data", "binaryData", "immutable") + (("type",) if rtype == "secrets" else ()):
            if key in obj:
                out[key] = obj[key]
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
                    any(current.get(k) != twin.get(k) for k in ("data", "binaryData", "type", "immutable"))
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
        """Every ConfigMap and Secret of a namespace that has just been offloaded."""
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
