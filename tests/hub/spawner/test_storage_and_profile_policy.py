"""Storage policy and per-profile placement settings, in a real hub against the federation."""

from __future__ import annotations

import pytest
from helpers.federation import DONOR, env_of, messages, occupy, pod_of
from helpers.hub import GPU_PROFILES

from jupyter_gpuburst.core import keys

pytestmark = pytest.mark.integration

HOME = """
c.KubeSpawner.storage_pvc_ensure = True
c.KubeSpawner.storage_capacity = "1Gi"
c.KubeSpawner.pvc_name_template = "claim-{user_server}"
c.KubeSpawner.volumes = [{"name": "home", "persistentVolumeClaim": {"claimName": "{pvc_name}"}}]
c.KubeSpawner.volume_mounts = [{"name": "home", "mountPath": "/tmp/gpuburst-home"}]
"""


def volumes(pod) -> dict:
    return {v["name"]: v for v in pod["spec"].get("volumes") or []}


async def test_scratch_on_donor_mounts_home_on_the_origin_and_scratch_on_the_donor(federation, start_hub):
    # a slow spawn (202) streams its progress events; one already ready shows only "Server ready"
    hub = await start_hub(
        HOME + 'c.GPUBurstSpawner.storage_policy = "scratch-on-donor"\nc.JupyterHub.tornado_settings = {"slow_spawn_timeout": 0.2}'
    )
    status, body = await hub.spawn("alice", {"profile": "gpu2"})
    assert status in (201, 202), body
    await hub.wait_ready("alice")
    alice = pod_of(federation, "alice")
    assert alice["metadata"]["labels"][keys.SITE_LABEL] == keys.ORIGIN_SITE
    assert volumes(alice)["home"]["persistentVolumeClaim"]["claimName"] == "claim-alice"
    assert env_of(alice)["JUPYTER_GPUBURST_STORAGE"]["value"] == "home"

    # the origin is full now: bob goes to the donor, where his origin-bound home cannot follow
    status, body = await hub.spawn("bob", {"profile": "gpu1"})
    assert status == 202, body
    events = messages(await hub.progress("bob"))
    await hub.wait_ready("bob")
    bob = pod_of(federation, "bob")
    assert bob["spec"]["nodeName"] == DONOR
    assert volumes(bob)["home"] == {"name": "home", "emptyDir": {}}
    env = env_of(bob)
    assert env["JUPYTER_GPUBURST_STORAGE"]["value"] == "scratch"
    message = env["JUPYTER_GPUBURST_STORAGE_MESSAGE"]["value"]
    assert "your home directory stays on the origin" in message and "lost when the server stops" in message
    assert message in events  # told on the spawn page too
    code, _ = await hub.get_via_proxy("bob")
    assert code == 200
    # the claim itself is untouched on the origin
    assert federation.origin.store.get("persistentvolumeclaims", "default", "claim-bob")["status"]["phase"] == "Bound"


async def test_pin_to_volume_keeps_servers_with_their_home_and_says_why(federation, start_hub):
    occupy(federation, "origin-gpu", 2, "hog")
    hub = await start_hub(HOME)  # pin-to-volume is the default
    status, body = await hub.spawn("carol", {"profile": "gpu1"})
    assert status == 503, body
    assert "your home volume is on the origin; storage policy pins servers to it" in body["message"]
    assert pod_of(federation, "carol") is None


async def test_storage_policy_set_per_profile(federation, start_hub):
    occupy(federation, "origin-gpu", 2, "hog")
    profiles = GPU_PROFILES + [
        {
            "display_name": "One GPU anywhere, scratch on donors",
            "slug": "gpu1-scratch",
            "kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": "1"}, "storage_policy": "scratch-on-donor"},
        }
    ]
    hub = await start_hub(HOME + f"c.KubeSpawner.profile_list = {profiles!r}")
    status, body = await hub.spawn("dan", {"profile": "gpu1-scratch"})
    assert status in (201, 202), body
    await hub.wait_ready("dan")
    assert env_of(pod_of(federation, "dan"))["JUPYTER_GPUBURST_STORAGE"]["value"] == "scratch"


async def test_placement_strategy_set_per_profile(federation, start_hub):
    profiles = GPU_PROFILES + [
        {
            "display_name": "One GPU, donors first",
            "slug": "gpu1-donor",
            "kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": "1"}, "strategy": "donor-first"},
        }
    ]
    hub = await start_hub(f"c.KubeSpawner.profile_list = {profiles!r}")
    status, body = await hub.spawn("erin", {"profile": "gpu1-donor"})
    assert status in (201, 202), body
    await hub.wait_ready("erin")
    assert pod_of(federation, "erin")["spec"]["nodeName"] == DONOR  # the origin had room
    status, body = await hub.spawn("frank", {"profile": "gpu1"})
    assert status in (201, 202), body
    await hub.wait_ready("frank")
    assert pod_of(federation, "frank")["metadata"]["labels"][keys.SITE_LABEL] == keys.ORIGIN_SITE


async def test_config_on_a_subclass_section_applies(federation, start_hub):
    hub = await start_hub(
        "from jupyter_gpuburst.hub.spawner import GPUBurstSpawner\n"
        "class CourseSpawner(GPUBurstSpawner):\n"
        "    pass\n"
        "c.JupyterHub.spawner_class = CourseSpawner\n"
        'c.CourseSpawner.strategy = "donor-only"\n'
    )
    status, body = await hub.spawn("gina", {"profile": "gpu1"})
    assert status in (201, 202), body
    await hub.wait_ready("gina")
    assert pod_of(federation, "gina")["spec"]["nodeName"] == DONOR


async def test_a_hub_wide_trait_in_a_profile_stops_the_hub_at_start(federation, start_hub):
    profiles = GPU_PROFILES + [{"display_name": "x", "slug": "x", "kubespawner_override": {"gpu_resource_names": ["x.com/gpu"]}}]
    with pytest.raises(AssertionError, match="hub exited") as failed:
        await start_hub(f"c.KubeSpawner.profile_list = {profiles!r}\nfrom jupyter_gpuburst.hub import install\ninstall(c)")
    assert "profile 'x' sets gpu_resource_names in kubespawner_override" in str(failed.value)
    assert "set c.GPUBurstSpawner.gpu_resource_names instead" in str(failed.value)
