"""Volumes in the federation: claims bound per site, and Liqo's `liqo` storage class semantics."""

from __future__ import annotations

import sys

import kubernetes_validate
import pytest

from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.sim import storage
from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.peering import NSOFF
from jupyter_gpuburst.sim.store import Store
from jupyter_gpuburst.sim.testing import is_running_ready, wait_for_pod, wait_until

pytestmark = pytest.mark.integration
REMOTE_NS = liqo.remote_namespace_name("default", "origin")


def claim(name: str, storage_class: str | None = None) -> dict:
    spec = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "10Gi"}}}
    if storage_class:
        spec["storageClassName"] = storage_class
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}, "spec": spec}


def pod_with_home(name: str, claim_name: str, donor: str | None) -> dict:
    spec = {
        "terminationGracePeriodSeconds": 1,
        "volumes": [{"name": "home", "persistentVolumeClaim": {"claimName": claim_name}}],
        "containers": [
            {
                "name": "nb",
                "image": "python",
                "command": [sys.executable, "-c", "import time; time.sleep(60)"],
                "volumeMounts": [{"name": "home", "mountPath": "/home/jovyan"}],
            }
        ],
    }
    if donor:
        spec["tolerations"] = [liqo.virtual_node_toleration()]
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [liqo.donor_node_affinity_term(donor)]}
            }
        }
    else:
        spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [liqo.local_node_affinity_term()]}}
        }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


async def offload(federation) -> None:
    origin = federation.origin.store
    origin.create(NSOFF, liqo.namespace_offloading("default"), "default")
    await wait_until(
        lambda: (origin.get(NSOFF, "default", "offloading").get("status") or {}).get("offloadingPhase") == "Ready", what="offloading ready"
    )


def phase(store, name: str, namespace: str = "default") -> str:
    return (store.get("persistentvolumeclaims", namespace, name).get("status") or {}).get("phase")


async def test_each_cluster_has_a_default_class_and_the_origin_gets_liqos(federation):
    origin, donor = federation.origin.store, federation.donors["donor-1"].store
    origin_classes = {sc["metadata"]["name"]: sc for sc in origin.list(storage.STORAGE_CLASSES)[0]}
    assert set(origin_classes) == {"standard", "liqo"}
    assert origin_classes["liqo"]["provisioner"] == "liqo.io/storage"
    assert origin_classes["liqo"]["volumeBindingMode"] == "WaitForFirstConsumer"
    assert {sc["metadata"]["name"] for sc in donor.list(storage.STORAGE_CLASSES)[0]} == {"standard"}
    for sc in origin_classes.values():
        kubernetes_validate.validate(sc, "1.31", strict=True)


async def test_a_default_class_claim_binds_at_once_on_its_own_cluster(federation):
    origin = federation.origin.store
    origin.create("persistentvolumeclaims", claim("claim-alice"), "default")
    await wait_until(lambda: phase(origin, "claim-alice") == "Bound", what="claim bound")
    pvc = origin.get("persistentvolumeclaims", "default", "claim-alice")
    pv = origin.get("persistentvolumes", None, pvc["spec"]["volumeName"])
    assert pv["spec"]["claimRef"]["uid"] == pvc["metadata"]["uid"] and pv["spec"]["storageClassName"] == "standard"
    kubernetes_validate.validate(pvc, "1.31", strict=True)
    kubernetes_validate.validate(pv, "1.31", strict=True)


async def test_an_origin_claim_does_not_follow_its_pod_to_a_donor(federation):
    origin, donor = federation.origin.store, federation.donors["donor-1"].store
    await offload(federation)
    origin.create("persistentvolumeclaims", claim("claim-bob"), "default")
    await wait_until(lambda: phase(origin, "claim-bob") == "Bound", what="claim bound")
    origin.create("pods", pod_with_home("jupyter-bob", "claim-bob", "donor-1"), "default")
    # the origin binds it to the virtual node (a network volume has no node affinity) ...
    await wait_until(
        lambda: origin.get("pods", "default", "jupyter-bob")["spec"].get("nodeName") == "donor-1", what="bound to the virtual node"
    )

    # ... and the donor cannot schedule it: its twin names a claim the donor does not have
    def donor_failed() -> list:
        events, _ = origin.list("events", "default", field_selector="involvedObject.name=jupyter-bob")
        return [e for e in events if e["reason"] == "FailedScheduling"]

    await wait_until(lambda: donor_failed(), what="FailedScheduling reflected from the donor")
    assert 'persistentvolumeclaim "claim-bob" not found' in donor_failed()[0]["message"]
    assert origin.get("pods", "default", "jupyter-bob")["status"]["phase"] == "Pending"
    assert donor.list("persistentvolumeclaims", REMOTE_NS)[0] == []


async def test_a_liqo_claim_binds_where_its_first_pod_lands_and_pins_later_pods(federation):
    origin, donor = federation.origin.store, federation.donors["donor-1"].store
    await offload(federation)
    origin.create("persistentvolumeclaims", claim("claim-carol", "liqo"), "default")
    await wait_until(
        lambda: any(e["reason"] == "WaitForFirstConsumer" for e in origin.list("events", "default")[0]), what="waiting for a consumer"
    )
    assert phase(origin, "claim-carol") == "Pending"
    origin.create("pods", pod_with_home("jupyter-carol", "claim-carol", "donor-1"), "default")
    await wait_for_pod(origin, "default", "jupyter-carol", is_running_ready)
    pvc = origin.get("persistentvolumeclaims", "default", "claim-carol")
    assert pvc["status"]["phase"] == "Bound"
    assert pvc["metadata"]["annotations"][storage.SELECTED_NODE_ANNOTATION] == "donor-1"
    twin = donor.get("persistentvolumeclaims", REMOTE_NS, "claim-carol")
    assert twin["spec"]["storageClassName"] == "standard"
    await wait_until(lambda: phase(donor, "claim-carol", REMOTE_NS) == "Bound", what="twin bound on the donor")

    # a later pod of the same claim that asks for the origin: volume node affinity conflict
    origin.delete("pods", "default", "jupyter-carol", grace_period_seconds=0)
    await wait_until(
        lambda: not [p for p in origin.list("pods", "default")[0] if p["metadata"]["name"] == "jupyter-carol"], what="pod gone"
    )
    await wait_until(lambda: not donor.list("pods", REMOTE_NS)[0], what="donor pod gone")
    origin.create("pods", pod_with_home("jupyter-carol", "claim-carol", None), "default")

    def unschedulable() -> str | None:
        pod = origin.get("pods", "default", "jupyter-carol")
        return next((c["message"] for c in (pod.get("status") or {}).get("conditions") or [] if c.get("reason") == "Unschedulable"), None)

    await wait_until(unschedulable, what="unschedulable on the origin")
    assert "volume node affinity conflict" in unschedulable()


async def test_a_pod_of_a_missing_claim_is_unschedulable_everywhere(federation):
    origin = federation.origin.store
    origin.create("pods", pod_with_home("jupyter-dan", "claim-dan", None), "default")

    def message() -> str | None:
        pod = origin.get("pods", "default", "jupyter-dan")
        return next((c["message"] for c in (pod.get("status") or {}).get("conditions") or [] if c.get("reason") == "Unschedulable"), None)

    await wait_until(message, what="unschedulable")
    assert message().startswith("0/") and 'persistentvolumeclaim "claim-dan" not found' in message()


def test_a_volume_whose_csi_driver_is_no_dns_subdomain_is_refused_as_kube_apiserver_refuses_it():
    # kube-apiserver 1.35 answered the emulator's own volumes (driver "sim.gpuburst.jupyter.org/network-volume") with this 422
    store = Store()
    pvc = {"metadata": {"name": "claim-a", "namespace": "default", "uid": "u-1"}, "spec": claim("claim-a")["spec"]}
    sc = storage.storage_class("standard", storage.DEFAULT_PROVISIONER, "Immediate")
    bad = storage.provisioned_volume(pvc, sc)
    bad["spec"]["csi"]["driver"] = storage.DEFAULT_PROVISIONER
    with pytest.raises(ApiError) as refused:
        store.create("persistentvolumes", bad)
    assert refused.value.code == 422 and 'spec.csi.driver: Invalid value: "sim.gpuburst.jupyter.org/network-volume"' in str(refused.value)
    made = store.create("persistentvolumes", storage.provisioned_volume(pvc, sc))
    assert made["spec"]["csi"]["driver"] == storage.CSI_DRIVER
    kubernetes_validate.validate(made, "1.31", strict=True)
