"""A pre-started kernel's pod is a kernel pod like a cold one: the admin's ``modify_pod_hook``
changes it too, and every kernel pod runs with the servers' uid, gid and fsGroup."""

from __future__ import annotations

import pytest
from traitlets import TraitError
from traitlets.config import Config

from jupyter_gpuburst.core.placement import Placement
from jupyter_gpuburst.hub.kernels import manifests
from jupyter_gpuburst.hub.kernels.files import scratch
from jupyter_gpuburst.hub.kernels.settings import GPUKernelSettings, kernel_settings_from_config
from jupyter_gpuburst.hub.pools import live
from jupyter_gpuburst.hub.pools.settings import WarmPools

POOL = "donor-1.gpu-1.kernels"


def config() -> Config:
    c = Config()
    c.GPUKernelSettings.profiles = [{"slug": "gpu-1", "display_name": "1 GPU", "resource": "nvidia.com/gpu", "count": 1}]
    c.WarmPools.kernels = [{"site": "donor-1", "profile": "gpu-1", "count": 1}]
    c.KubeSpawner.uid, c.KubeSpawner.gid, c.KubeSpawner.fs_gid = 1234, 2345, 3456
    return c


async def test_the_admins_hook_and_the_servers_ids_reach_a_pre_started_kernel():
    seen = []

    async def hook(pod, placement):  # async, as KubeSpawner's may be
        seen.append((placement.site, placement.resource, placement.count))
        pod["spec"]["containers"][0]["env"].append({"name": "SITE_SAYS", "value": placement.site})
        return pod

    c = config()
    c.GPUKernelSettings.modify_pod_hook = hook
    builders = live.kernel_pod_builders(c, WarmPools(config=c), "jhub")
    pod = await builders[POOL]()
    assert seen == [("donor-1", "nvidia.com/gpu", 1)]
    assert {"name": "SITE_SAYS", "value": "donor-1"} in pod["spec"]["containers"][0]["env"]
    context = pod["spec"]["securityContext"]
    assert (context["runAsUser"], context["runAsGroup"], context["fsGroup"]) == (1234, 2345, 3456)
    assert context["runAsNonRoot"] is True


async def test_a_hook_that_returns_no_pod_is_named():
    c = config()
    c.GPUKernelSettings.modify_pod_hook = lambda pod, placement: None
    builders = live.kernel_pod_builders(c, WarmPools(config=c), "jhub")
    with pytest.raises(TypeError, match="modify_pod_hook must return the pod as a dict, not NoneType"):
        await builders[POOL]()


def cold_pod(settings: GPUKernelSettings) -> dict:
    """A cold kernel's pod, with the ids the registry passes from its settings."""
    placement = Placement(site="origin", cluster_id=None, node=None, resource="nvidia.com/gpu", count=1, reason="")
    profile = settings.kernel_profiles()["gpu-1"]
    files = scratch(placement)
    return manifests.kernel_pod(
        name="k",
        namespace="jhub",
        record_id="r",
        user="alice",
        groups=[],
        server_name="",
        profile=profile,
        placement=placement,
        attempts=1,
        image="img",
        ports=settings.ports(0),
        files=files,
        note="",
        secret_name="k",
        server_pod=None,
        grace_seconds=1,
        uid=settings.uid,
        gid=settings.gid,
        fs_gid=settings.fs_gid,
    )


def test_kernel_pods_take_the_servers_ids_not_a_fixed_1000_100():
    settings = kernel_settings_from_config(config())
    assert (settings.uid, settings.gid, settings.fs_gid) == (1234, 2345, 3456)
    context = cold_pod(settings)["spec"]["securityContext"]
    assert (context["runAsUser"], context["runAsGroup"], context["fsGroup"]) == (1234, 2345, 3456)
    # the spawner sets none: the image's user, as for the servers (no id of our own)
    c = config()
    del c.KubeSpawner["uid"], c.KubeSpawner["gid"], c.KubeSpawner["fs_gid"]
    context = cold_pod(kernel_settings_from_config(c))["spec"]["securityContext"]
    assert not {"runAsUser", "runAsGroup", "fsGroup"} & set(context) and context["runAsNonRoot"] is True
    # the kernel settings' own win
    c = config()
    c.GPUKernelSettings.uid = 4321
    assert kernel_settings_from_config(c).uid == 4321


def test_ids_a_kernel_pod_cannot_take_are_refused_with_the_reason():
    c = config()
    c.KubeSpawner.uid = lambda spawner: 1000
    with pytest.raises(ValueError, match=r"KubeSpawner.uid is a callable.*set GPUKernelSettings.uid"):
        kernel_settings_from_config(c)
    with pytest.raises(TraitError, match=r"GPUKernelSettings.uid = 0: kernel pods never run as root"):
        GPUKernelSettings(uid=0)
    with pytest.raises(TraitError, match=r"GPUKernelSettings.fs_gid = -1: it must be >= 0"):
        GPUKernelSettings(fs_gid=-1)
