"""GPU kernel profiles come from any list of server profiles and any configured GPU resource;
when none can be derived, the hub's log says why at start."""

from __future__ import annotations

import asyncio
import logging

import pytest
from traitlets.config import Config

from jupyter_gpuburst.hub.kernels import install
from jupyter_gpuburst.hub.kernels.settings import kernel_settings_from_config, profile_notes


def gpu_profile(slug: str, resource: str, count: str = "1") -> dict:
    return {"slug": slug, "display_name": slug, "kubespawner_override": {"extra_resource_limits": {resource: count}}}


def test_amd_and_configured_gpu_resources_get_kernel_profiles():
    c = Config()
    c.KubeSpawner.profile_list = [gpu_profile("amd", "amd.com/gpu"), gpu_profile("gaudi", "habana.ai/gaudi", "2")]
    assert [(p.resource, p.count) for p in kernel_settings_from_config(c).kernel_profiles().values()] == [("amd.com/gpu", 1)]
    # a resource the spawner counts as a GPU is a GPU kernel too
    c.GPUBurstSpawner.gpu_resource_names = ["amd.com/gpu", "habana.ai/gaudi"]
    derived = kernel_settings_from_config(c).kernel_profiles().values()
    assert [(p.resource, p.count) for p in derived] == [("amd.com/gpu", 1), ("habana.ai/gaudi", 2)]
    assert profile_notes(c) == []


def test_a_callable_profile_list_is_explained_not_silently_empty():
    c = Config()
    c.KubeSpawner.profile_list = lambda spawner: [gpu_profile("gpu-1", "nvidia.com/gpu")]
    assert kernel_settings_from_config(c).profiles == []
    [note] = profile_notes(c)
    assert "callable" in note and "c.GPUKernelSettings.profiles" in note
    # listing them is the fix
    c.GPUKernelSettings.profiles = [{"resource": "nvidia.com/gpu"}]
    assert profile_notes(c) == []


def test_profiles_without_a_gpu_are_explained():
    c = Config()
    c.KubeSpawner.profile_list = [gpu_profile("fpga", "xilinx.com/fpga")]
    [note] = profile_notes(c)
    assert "nvidia.com/gpu" in note and "nvidia.com/mig-*" in note


async def test_the_hub_logs_the_reason_once_it_runs(caplog):
    c = Config()
    c.KubeSpawner.profile_list = lambda spawner: []
    with caplog.at_level(logging.WARNING, logger="JupyterHub"):
        install(c, "gpuburst")
        install(c, "gpuburst")  # calling it twice changes nothing
        await asyncio.sleep(0)  # the hub's loop runs: the whole config has been read
    assert sum("No GPU kernels are offered" in r.getMessage() for r in caplog.records) == 1


def test_derived_slugs_are_unique_per_resource_and_count():
    c = Config()
    c.GPUBurstSpawner.gpu_resource_names = ["nvidia.com/gpu", "amd.com/gpu", "habana.ai/gaudi"]
    c.KubeSpawner.profile_list = [
        gpu_profile("nvidia", "nvidia.com/gpu"),
        gpu_profile("amd", "amd.com/gpu"),
        gpu_profile("amd-2", "amd.com/gpu", "2"),
        gpu_profile("gaudi", "habana.ai/gaudi", "2"),
        gpu_profile("mig", "nvidia.com/mig-1g.10gb"),
    ]
    slugs = {slug: (p.resource, p.count) for slug, p in kernel_settings_from_config(c).kernel_profiles().items()}
    assert slugs == {
        "gpu-1": ("nvidia.com/gpu", 1),
        "amd-gpu-1": ("amd.com/gpu", 1),
        "amd-gpu-2": ("amd.com/gpu", 2),
        "habana-gaudi-2": ("habana.ai/gaudi", 2),
        "mig-1g-10gb-1": ("nvidia.com/mig-1g.10gb", 1),
    }


def test_a_slug_collision_is_a_configuration_error_naming_both_profiles():
    c = Config()
    c.GPUKernelSettings.profiles = [
        {"resource": "nvidia.com/gpu"},
        {"slug": "gpu-1", "display_name": "AMD GPU", "resource": "amd.com/gpu"},
    ]
    with pytest.raises(
        ValueError, match=r"'Python 3 \(1 GPU\)' \(1 × nvidia.com/gpu\) and 'AMD GPU' \(1 × amd.com/gpu\) both have the slug 'gpu-1'"
    ):
        kernel_settings_from_config(c).kernel_profiles()
