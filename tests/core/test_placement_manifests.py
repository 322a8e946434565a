"""Pod fragments from placements validate against the real Kubernetes schema."""

from __future__ import annotations

import kubernetes_validate
import pytest

from jupyter_gpuburst.bench import synthetic
from jupyter_gpuburst.core.placement import GPURequest, Placement, Policy, decide

K8S_VERSION = kubernetes_validate.latest_version()
GPU = "nvidia.com/gpu"


def pod_with(placement: Placement) -> dict:
    pod = synthetic.pod("jupyter-ann", gpus={placement.resource: placement.count})
    pod["metadata"]["labels"].update(placement.labels())
    pod["metadata"]["annotations"]["gpuburst.jupyter.org/reason"] = placement.reason
    pod["spec"]["affinity"] = {"nodeAffinity": placement.node_affinity()}
    if placement.tolerations():
        pod["spec"]["tolerations"] = placement.tolerations()
    del pod["status"]
    return pod


@pytest.fixture
def snapshot():
    from jupyter_gpuburst.core.inventory import Inventory

    inv = Inventory()
    inv.apply_node_event("ADDED", synthetic.node("gpu-0", {GPU: 1}))
    inv.apply_node_event("ADDED", synthetic.node("liqo-donor-1", {GPU: 8}, cluster_id="donor-1"))
    return inv.snapshot()


@pytest.mark.parametrize("count, site", [(1, "origin"), (4, "donor-1")])
def test_placement_fragments_validate(snapshot, count, site):
    placement = decide(GPURequest(GPU, count, "ann"), snapshot, Policy())
    assert placement.site == site
    kubernetes_validate.validate(pod_with(placement), K8S_VERSION, strict=True)


def test_validation_would_catch_a_bad_fragment(snapshot):
    placement = decide(GPURequest(GPU, 4, "ann"), snapshot, Policy())
    pod = pod_with(placement)
    pod["spec"]["tolerations"][0]["effect"] = 7
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)
