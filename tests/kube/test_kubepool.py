"""The kube tier keeps a worker's federation from one test to the next (helpers/kubepool.py): what
a test left is deleted, and a federation that cannot be put back as it started is not kept."""

from __future__ import annotations

import sys

import pytest
from helpers.kubepool import FederationPool
from helpers.kubetier import USERS_NAMESPACE, install

from jupyter_gpuburst.sim.testing import gone, is_running_ready, wait_for_pod

pytestmark = pytest.mark.kube

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]


def pod(name: str, gpus: int = 0) -> dict:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    container = {"name": "c", "image": "python", "command": SLEEPER, "resources": {"limits": limits}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {"containers": [container]}}


async def test_a_kept_federation_is_put_back_as_it_started_or_not_kept(tmp_path):
    pool = FederationPool(tmp_path / "federations", tmp_path / "audit")
    (tmp_path / "audit").mkdir()
    fed = await pool.take(install)
    try:
        origin, donor = fed.origin.store, next(iter(fed.donors.values())).store
        # what tests leave: a running GPU pod, a namespace with a pod and a ConfigMap in it, a
        # claim, a cluster-wide PriorityClass, and a pod on a donor
        origin.create("pods", pod("left-gpu", gpus=1), USERS_NAMESPACE)
        origin.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "left"}})
        origin.create("pods", pod("left-in-namespace"), "left")
        origin.create("configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "left"}, "data": {"a": "b"}}, "left")
        claim = {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "left"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        }
        origin.create("persistentvolumeclaims", claim, USERS_NAMESPACE)
        origin.create(
            "priorityclasses.scheduling.k8s.io",
            {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "left"}, "value": 7},
        )
        donor.create("pods", pod("left-on-donor"), "default")
        await wait_for_pod(origin, USERS_NAMESPACE, "left-gpu", is_running_ready, timeout=60)
        await wait_for_pod(donor, "default", "left-on-donor", is_running_ready, timeout=60)
        assert fed.origin.kubelet.processes() and fed.donors[next(iter(fed.donors))].kubelet.processes()

        await pool.give_back(fed, failed=False)
        assert pool.idle is fed, "a federation whose test left only what can be deleted is kept"
        for rtype, namespace, name in [
            ("pods", USERS_NAMESPACE, "left-gpu"),
            ("namespaces", None, "left"),
            ("persistentvolumeclaims", USERS_NAMESPACE, "left"),
            ("priorityclasses.scheduling.k8s.io", None, "left"),
        ]:
            assert gone(origin, rtype, namespace, name), (rtype, namespace, name)
        assert gone(donor, "pods", "default", "left-on-donor")
        assert not fed.origin.kubelet.processes() and not next(iter(fed.donors.values())).kubelet.processes()
        # the install is still there, and the GPU the pod held is free again for the next test
        origin.get("serviceaccounts", "jhub", "hub")
        assert await pool.take(install) is fed

        # a test that removed part of the install: the next test gets a new federation
        origin.delete("rolebindings.rbac.authorization.k8s.io", USERS_NAMESPACE, "gpuburst-hub-kernels")
        await pool.give_back(fed, failed=False)
        assert pool.idle is None
        assert list((tmp_path / "audit").glob("*.jsonl")), "a federation that is stopped gives its audit log to the tier"
    finally:
        if pool.idle is None and fed.started:
            await pool._stop(fed)
        await pool.close()
