"""A site on the real control plane: our kubelet joins it as a node agent, kube-scheduler binds,
kube-controller-manager's controllers act, and Liqo's CRDs validate what we write."""

from __future__ import annotations

import os
import sys

import psutil
import pytest

from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.kube.controlplane import GO_GC_PERCENT
from jupyter_gpuburst.sim.peering import NSOFF
from jupyter_gpuburst.sim.testing import is_running_ready, wait_for_pod, wait_until

pytestmark = pytest.mark.kube


def gpu_pod(name: str, gpus: int) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "t"}},
        "spec": {
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {
                    "name": "c",
                    "image": "python",
                    "command": [sys.executable, "-c", "import time; time.sleep(600)"],
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }
            ],
        },
    }


async def test_nodes_join_with_gpus_and_renew_their_leases(federation):
    origin = federation.origin.store
    node = origin.get("nodes", None, "origin-gpu")
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "2"
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB"
    first = await wait_until(lambda: _lease(origin, "origin-gpu"), timeout=30, what="the node's lease")
    await wait_until(lambda: _lease(origin, "origin-gpu") != first, timeout=30, what="the lease renewed")
    # the node lifecycle controller saw a healthy node: no not-ready taint
    node = origin.get("nodes", None, "origin-gpu")
    assert not [t for t in node["spec"].get("taints") or [] if t["key"].startswith("node.kubernetes.io/")]
    # a donor's virtual node too, as Liqo's virtual kubelet renews it (silent, it turned
    # unreachable after the controller's 40 s grace and the hub took the donor for gone)
    first = await wait_until(lambda: _lease(origin, "donor-1"), timeout=30, what="the virtual node's lease")
    await wait_until(lambda: _lease(origin, "donor-1") != first, timeout=30, what="the virtual node's lease renewed")
    # a lease late once (the node agents under load): the controller sets Ready Unknown, and the
    # kubelet posts Ready again at its next status sync, as a real one does
    node = origin.get("nodes", None, "origin-gpu")
    for condition in node["status"]["conditions"]:
        condition.update(status="Unknown", reason="NodeStatusUnknown", message="Kubelet stopped posting node status.")
    # a condition another controller owns is left as it is
    node["status"]["conditions"].append(
        {"type": "NetworkUnavailable", "status": "False", "reason": "RouteCreated", "message": "routes made by the test"}
    )
    marked = origin.replace("nodes", node, "status")
    assert {c["type"]: c["status"] for c in marked["status"]["conditions"]}["Ready"] == "Unknown"
    # posted after the mark (the store reads its watch cache, which may still hold the node as it
    # was; etcd's revisions only grow, so a later write has a larger resourceVersion)
    await wait_until(
        lambda: _ready(origin, "origin-gpu") == "True" and _version(origin, "origin-gpu") > int(marked["metadata"]["resourceVersion"]),
        timeout=30,
        what="the node Ready again",
    )
    conditions = {c["type"]: c["status"] for c in origin.get("nodes", None, "origin-gpu")["status"]["conditions"]}
    assert conditions == {
        "MemoryPressure": "False",
        "DiskPressure": "False",
        "PIDPressure": "False",
        "Ready": "True",
        "NetworkUnavailable": "False",
    }
    # every component runs with the collector set for CPU (controlplane.GO_GC_PERCENT)
    pids = federation.origin.control_plane.pids()
    assert len(pids) == 4
    for pid in pids:
        assert psutil.Process(pid).environ().get("GOGC") == os.environ.get("GOGC", GO_GC_PERCENT), pid


def _version(store, name: str) -> int:
    return int(store.get("nodes", None, name)["metadata"]["resourceVersion"])


def _ready(store, name: str) -> str:
    conditions = store.get("nodes", None, name)["status"]["conditions"]
    return next(c["status"] for c in conditions if c["type"] == "Ready")


def _lease(store, name: str) -> str | None:
    try:
        return store.get("leases", "kube-node-lease", name)["spec"]["renewTime"]
    except ApiError:
        return None


async def test_kube_scheduler_binds_and_our_kubelet_runs_the_pod(federation):
    origin = federation.origin.store
    await wait_until(lambda: origin.exists("serviceaccounts", "default", "default"), timeout=60, what="the default ServiceAccount")
    origin.create("pods", gpu_pod("one", 2), "default")
    running = await wait_for_pod(origin, "default", "one", is_running_ready, timeout=60)
    assert running["spec"]["nodeName"] == "origin-gpu"
    assert running["status"]["podIP"].startswith("127.10.")
    # the kubelet posts its events beside the status, as the real one does: they come, in any order
    await wait_until(
        lambda: (
            {"Scheduled", "Pulled", "Created", "Started"}
            <= {e["reason"] for e in origin.list("events", "default", field_selector="involvedObject.name=one")[0]}
        ),
        timeout=30,
        what="the scheduler's and the kubelet's events",
    )
    # a second GPU pod does not fit: the real scheduler says why
    origin.create("pods", gpu_pod("two", 1), "default")
    pending = await wait_for_pod(
        origin, "default", "two", lambda p: (p["status"].get("conditions") or [{}])[0].get("reason") == "Unschedulable", timeout=60
    )
    assert "Insufficient nvidia.com/gpu" in pending["status"]["conditions"][0]["message"]
    # graceful deletion: the pod goes once its container has stopped
    origin.delete("pods", "default", "one")
    await wait_until(lambda: not origin.exists("pods", "default", "one"), timeout=60, what="the pod removed")
    await wait_for_pod(origin, "default", "two", is_running_ready, timeout=60)


async def test_liqo_schema_refuses_a_bad_namespace_offloading(federation):
    origin = federation.origin.store
    bad = liqo.namespace_offloading("default")
    bad["spec"]["podOffloadingStrategy"] = "Everywhere"
    with pytest.raises(ApiError) as refused:
        origin.create(NSOFF, bad, "default")
    assert refused.value.code == 422 and "podOffloadingStrategy" in refused.value.message
