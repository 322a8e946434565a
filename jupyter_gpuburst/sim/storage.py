"""PersistentVolumeClaims bound per site, and Liqo's virtual storage class, for the emulator.

What a real cluster with Liqo does and this emulates:

* Every cluster has a default StorageClass (``standard``, ``volumeBindingMode: Immediate``, a
  network volume reachable from all of that cluster's nodes). A claim of it (or of no class) is
  bound at once to a new PersistentVolume of the same cluster.
* Peering installs Liqo's virtual StorageClass ``liqo`` (Liqo's own provisioner,
  ``WaitForFirstConsumer``) in the origin. Its claim stays Pending until kube-scheduler picks a
  node for its first pod; the claim then gets ``volume.kubernetes.io/selected-node`` and is bound
  to a volume whose node affinity keeps later pods on that site: the virtual node for a donor
  (whose twin claim Liqo creates in the offloaded namespace), the origin's real nodes otherwise.
* Liqo carries a pod's ``volumes`` verbatim to the donor and reflects only claims of its own
  class. A pod bound to a virtual node with a claim of any other class therefore reaches a donor
  that has no such claim: the donor's scheduler reports ``persistentvolumeclaim "<name>" not
  found``, the event is reflected onto the origin pod, and the pod stays Pending, as on a real
  Liqo deployment.

The scheduler calls :class:`VolumeBinding` (its PreFilter, Filter and PreBind steps for volumes)
and the peering calls :func:`reflect_claims`; the rest of the emulator does not know about storage.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Mapping
from typing import Any

from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.core.nodeselector import matches_node_affinity
from jupyter_gpuburst.sim.errors import ApiError

log = logging.getLogger(__name__)

Obj = dict[str, Any]

DEFAULT_CLASS = "standard"
DEFAULT_PROVISIONER = "sim.gpuburst.jupyter.org/network-volume"
# the CSI driver every emulated volume names, whichever class provisioned it: kube-apiserver
# refuses a PersistentVolume whose spec.csi.driver is not a DNS subdomain (a provisioner's
# name, with its "/", is not one)
CSI_DRIVER = "volumes.sim.gpuburst.jupyter.org"
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
SELECTED_NODE_ANNOTATION = "volume.kubernetes.io/selected-node"
BIND_COMPLETED_ANNOTATION = "pv.kubernetes.io/bind-completed"
STORAGE_CLASSES = "storageclasses.storage.k8s.io"

# kube-scheduler's VolumeBinding and VolumeRestrictions wording
VOLUME_NODE_CONFLICT = "node(s) had volume node affinity conflict"
UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"


def storage_class(name: str, provisioner: str, binding_mode: str, default: bool = False) -> Obj:
    annotations = {DEFAULT_CLASS_ANNOTATION: "true"} if default else {}
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name, "annotations": annotations},
        "provisioner": provisioner,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": binding_mode,
    }


def install_default_class(store: Any) -> None:
    _ensure(store, storage_class(DEFAULT_CLASS, DEFAULT_PROVISIONER, "Immediate", default=True))


def install_liqo_class(store: Any) -> None:
    """What ``liqoctl install`` leaves in a cluster: the virtual storage class."""
    _ensure(store, storage_class(liqo.VIRTUAL_STORAGE_CLASS, liqo.STORAGE_PROVISIONER, "WaitForFirstConsumer"))


def _ensure(store: Any, sc: Obj) -> None:
    try:
        store.get(STORAGE_CLASSES, None, sc["metadata"]["name"])
    except ApiError:
        store.create(STORAGE_CLASSES, sc)


def provisioned_volume(pvc: Mapping[str, Any], sc: Mapping[str, Any], node_affinity: Obj | None = None) -> Obj:
    """The PersistentVolume ``sc``'s provisioner makes for ``pvc``: named after the claim's uid
    (where the kubelet keeps its data), pre-bound to it, and kept to ``node_affinity``'s nodes."""
    meta = pvc["metadata"]
    volume_name = f"pvc-{meta['uid']}"
    spec = pvc.get("spec") or {}
    pv: Obj = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": volume_name, "annotations": {"pv.kubernetes.io/provisioned-by": sc["provisioner"]}},
        "spec": {
            "capacity": {"storage": ((spec.get("resources") or {}).get("requests") or {}).get("storage", "1Gi")},
            "accessModes": list(spec.get("accessModes") or ["ReadWriteOnce"]),
            "persistentVolumeReclaimPolicy": sc.get("reclaimPolicy", "Delete"),
            "storageClassName": sc["metadata"]["name"],
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
            "csi": {"driver": CSI_DRIVER, "volumeHandle": volume_name},
        },
    }
    if node_affinity is not None:
        pv["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": [node_affinity]}}
    return pv


def pod_claims(pod: Mapping[str, Any]) -> list[str]:
    out = []
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        name = (volume.get("persistentVolumeClaim") or {}).get("claimName")
        if name and name not in out:
            out.append(name)
    return out


def _is_virtual(node: Mapping[str, Any]) -> bool:
    return liqo.is_virtual_node(node)


class VolumeBinding:
    """The volume steps of one cluster's scheduler, and its claim binder (PV controller)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._task: asyncio.Task | None = None
        self.on_change: Any = None  # called after a claim binds (the scheduler retries its pods)

    # ---- the PV controller: Immediate claims bind at once -----------------------------------
    async def start(self) -> None:
        install_default_class(self.store)
        self._task = asyncio.create_task(self._watch_claims(), name="pv-controller")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _watch_claims(self) -> None:
        watch = self.store.watch("persistentvolumeclaims")
        try:
            async for etype, pvc in watch:
                if etype == "ADDED" and (pvc.get("status") or {}).get("phase") == "Pending":
                    try:
                        self.bind_if_immediate(pvc)
                    except ApiError as exc:
                        log.info("binding claim %s failed: %s", pvc["metadata"]["name"], exc)
        finally:
            watch.close()

    def _class(self, pvc: Mapping[str, Any]) -> Obj | None:
        name = (pvc.get("spec") or {}).get("storageClassName")
        if name is None:
            classes, _ = self.store.list(STORAGE_CLASSES)
            return next((c for c in classes if (c["metadata"].get("annotations") or {}).get(DEFAULT_CLASS_ANNOTATION) == "true"), None)
        try:
            return self.store.get(STORAGE_CLASSES, None, name)
        except ApiError:
            return None

    def bind_if_immediate(self, pvc: Obj) -> None:
        sc = self._class(pvc)
        if sc is None:
            return  # stays Pending, as with a class nobody provisions
        if sc.get("volumeBindingMode", "Immediate") != "Immediate":
            self.store.record_event(
                pvc,
                "WaitForFirstConsumer",
                "waiting for first consumer to be created before binding",
                component="persistentvolume-controller",
            )
            return
        self._bind(pvc, sc, node_affinity=None, selected_node=None)

    def _bind(self, pvc: Obj, sc: Obj, node_affinity: Obj | None, selected_node: str | None) -> Obj:
        meta = pvc["metadata"]
        pv = provisioned_volume(pvc, sc, node_affinity)
        volume_name = pv["metadata"]["name"]
        self.store.create("persistentvolumes", pv)

        def bound(claim: Obj) -> None:
            annotations = claim["metadata"].setdefault("annotations", {})
            annotations[BIND_COMPLETED_ANNOTATION] = "yes"
            if selected_node:
                annotations[SELECTED_NODE_ANNOTATION] = selected_node
            claim["spec"]["volumeName"] = volume_name
            claim["spec"].setdefault("storageClassName", sc["metadata"]["name"])
            claim["status"] = {"phase": "Bound", "accessModes": pv["spec"]["accessModes"], "capacity": pv["spec"]["capacity"]}

        updated = self.store.mutate("persistentvolumeclaims", meta["namespace"], meta["name"], bound)
        if self.on_change is not None:
            self.on_change()
        return updated

    # ---- the scheduler's volume steps --------------------------------------------------------
    def _claims(self, pod: Mapping[str, Any]) -> tuple[list[Obj], str | None]:
        """The pod's claims, or the PreFilter message that makes it unschedulable everywhere."""
        namespace = pod["metadata"]["namespace"]
        claims = []
        for name in pod_claims(pod):
            try:
                pvc = self.store.get("persistentvolumeclaims", namespace, name)
            except ApiError:
                return [], f'persistentvolumeclaim "{name}" not found'
            if pvc["metadata"].get("deletionTimestamp"):
                return [], f'persistentvolumeclaim "{name}" is being deleted'
            claims.append(pvc)
        for pvc in claims:
            if (pvc.get("status") or {}).get("phase") != "Bound":
                sc = self._class(pvc)
                if sc is None or sc.get("volumeBindingMode", "Immediate") == "Immediate":
                    return [], UNBOUND_IMMEDIATE
        return claims, None

    def prefilter(self, pod: Mapping[str, Any]) -> str | None:
        """Why no node can take ``pod`` because of its volumes, or None."""
        return self._claims(pod)[1]

    def filter(self, pod: Mapping[str, Any], node: Mapping[str, Any]) -> str | None:
        """Why ``node`` cannot take ``pod`` because of its bound volumes' node affinity, or None."""
        claims, _ = self._claims(pod)
        for pvc in claims:
            volume_name = (pvc.get("spec") or {}).get("volumeName")
            if not volume_name:
                continue
            try:
                pv = self.store.get("persistentvolumes", None, volume_name)
            except ApiError:
                continue
            required = ((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required")
            if required:
                probe = {"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}}}}
                if not matches_node_affinity(probe, node):
                    return VOLUME_NODE_CONFLICT
        return None

    def prebind(self, pod: Mapping[str, Any], node: Mapping[str, Any]) -> None:
        """Bind the pod's waiting claims for the chosen node (before the pod itself is bound)."""
        claims, _ = self._claims(pod)
        node_name = node["metadata"]["name"]
        for pvc in claims:
            if (pvc.get("status") or {}).get("phase") == "Bound":
                continue
            sc = self._class(pvc)
            if sc is None:
                continue
            if _is_virtual(node):
                # Liqo reflects the donor's volume back with affinity to the virtual node
                term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node_name]}]}
            else:
                # provisioned by the origin's real class: stays with the origin's own nodes
                term = {"matchExpressions": [{"key": liqo.TYPE_LABEL, "operator": "DoesNotExist"}]}
            self._bind(pvc, sc, term, node_name)


def reflect_claims(pod: Mapping[str, Any], origin_store: Any, donor_store: Any, remote_namespace: str, virtual_node: str) -> None:
    """Liqo's PVC reflection: twins of the pod's ``liqo``-class claims bound to this virtual node.

    Claims of other classes are not reflected: the pod's volumes go to the donor verbatim and
    name a claim the donor does not have.
    """
    namespace = pod["metadata"]["namespace"]
    for name in pod_claims(pod):
        try:
            pvc = origin_store.get("persistentvolumeclaims", namespace, name)
        except ApiError:
            continue
        annotations = pvc["metadata"].get("annotations") or {}
        if (pvc.get("spec") or {}).get("storageClassName") != liqo.VIRTUAL_STORAGE_CLASS:
            continue
        if annotations.get(SELECTED_NODE_ANNOTATION) != virtual_node:
            continue
        twin = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": name, "labels": copy.deepcopy(pvc["metadata"].get("labels") or {})},
            "spec": {
                "accessModes": list(pvc["spec"].get("accessModes") or ["ReadWriteOnce"]),
                "resources": copy.deepcopy(pvc["spec"].get("resources") or {}),
                # the class negotiated at peering: the donor's default
                "storageClassName": DEFAULT_CLASS,
            },
        }
        try:
            donor_store.create("persistentvolumeclaims", twin, remote_namespace)
        except ApiError as exc:
            if exc.code != 409:
                raise
