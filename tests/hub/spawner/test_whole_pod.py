"""The spawner places the pod it builds: every resource KubeSpawner writes into it."""

from __future__ import annotations

import pytest
from helpers.spawner import env, make_spawner, make_tracker, manifest_of

from jupyter_gpuburst.bench import synthetic
from jupyter_gpuburst.core import keys
from jupyter_gpuburst.hub.spawner import SpawnRefused

GPU = "nvidia.com/gpu"
GIB = 2**30
PROFILES = [
    {"display_name": "CPU", "slug": "cpu", "default": True},
    {
        "display_name": "1 GPU, 8 CPU",
        "slug": "gpu-big",
        "kubespawner_override": {"extra_resource_limits": {GPU: "1"}, "cpu_guarantee": 8, "mem_guarantee": "32G", "cpu_limit": 16},
    },
    {
        "display_name": "1 GPU, limits only",
        "slug": "gpu-limits",
        "kubespawner_override": {"extra_resource_limits": {GPU: "1"}, "cpu_limit": 2, "mem_limit": "4G"},
    },
]


def tracker_with_small_donor():
    tracker = make_tracker(local_free_nodes=({"origin-gpu": 1},))
    # a Liqo grant with Liqo's default 4 CPU / 8Gi beside the GPUs
    tracker._on_node_event("MODIFIED", synthetic.node("donor-1", {GPU: 8}, cluster_id="donor-1", cpu="4", memory="8Gi"))
    return tracker


async def test_the_request_is_the_built_pod_guarantees_and_limits_included(no_cluster):
    tracker = make_tracker()
    spawner = make_spawner(tracker, {"profile": "gpu-limits"}, profile_list=PROFILES)
    manifest = await manifest_of(spawner)
    (held,) = list(tracker.placer.reservations)
    # Kubernetes defaults requests to limits: 2 CPU and 4G (KubeSpawner's G is 2**30) are held
    assert dict(held.resources) == {"cpu": 2000, "memory": 4 * GIB, GPU: 1, "pods": 1}
    assert manifest["metadata"]["labels"][keys.SITE_LABEL] == "origin"
    assert env(manifest)["JUPYTER_GPUBURST_SITE"]["value"] == "origin"
    assert env(manifest)["JUPYTER_GPUBURST_NODE"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert tracker.snapshot().nodes["origin-gpu"].reserved["cpu"] == 2000


async def test_a_donor_granted_too_few_cpus_is_refused_with_the_resource_named(no_cluster):
    tracker = tracker_with_small_donor()
    tracker._on_pod_event("ADDED", synthetic.pod("busy", node_name="origin-gpu", gpus={GPU: 1}))
    spawner = make_spawner(tracker, {"profile": "gpu-big"}, profile_list=PROFILES)
    with pytest.raises(SpawnRefused) as info:
        await manifest_of(spawner)
    assert info.value.status_code == 503
    assert "donor-1: 4 CPU granted, profile gpu-big needs 8" in str(info.value)
    assert len(tracker.placer.reservations) == 0


async def test_the_form_marks_a_profile_full_when_only_cpu_is_short(no_cluster):
    tracker = tracker_with_small_donor()
    tracker._on_pod_event("ADDED", synthetic.pod("busy", node_name="origin-gpu", gpus={GPU: 1}))
    spawner = make_spawner(tracker, profile_list=PROFILES)
    form = await spawner._gb_render_form()
    assert "Full now: No site can start 1 GPU with 8 CPU" in form
    assert "4 CPU granted, profile gpu-big needs 8" in form
    # the small profile still fits the donor's grant
    assert "Would start on donor-1" in form
