"""A hub with GPU kernels: its config lines, the scopes a user needs to start GPU kernels, and a
kernel registry of its own on a fresh federation (for the registry's own tests)."""

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

KERNEL_HUB = """
from jupyter_gpuburst.hub import install
install(c)
c.JupyterHub.load_groups = {"gpu-students": {"users": ["alice", "bob"]}}
c.JupyterHub.load_roles.append({"name": "gpu-kernels", "scopes": ["custom:gpuburst:kernels", "access:services!service=gpuburst"], "groups": ["gpu-students"]})
c.GPUKernelSettings.reap_interval_seconds = 1
c.GPUKernelSettings.extra_env = {"JUPYTER_GPUBURST_BACKEND": "simulated"}
"""
KERNEL_SCOPES = ["custom:gpuburst:kernels", "access:services!service=gpuburst"]


@asynccontextmanager
async def registry_on_federation(tmp_path: Path, federation: dict | None = None, namespace: str = "default") -> AsyncIterator:
    """A KernelRegistry with one profile, ``gpu-1`` (1 GPU), on a running federation (``.federation``,
    the default one unless ``federation``) for servers in ``namespace``; every kernel it still has is
    stopped on the way out."""
    from kubernetes_asyncio import client, config

    from jupyter_gpuburst.hub.capacity.tracker import CapacityTracker
    from jupyter_gpuburst.hub.kernels.registry import KernelRegistry
    from jupyter_gpuburst.hub.kernels.settings import GPUKernelSettings
    from jupyter_gpuburst.hub.settings import GPUBurstSettings
    from jupyter_gpuburst.sim.testing import running_federation

    kubeconfig = tmp_path / "kubeconfig"
    async with running_federation(federation, state_dir=tmp_path / "sim", kubeconfig=kubeconfig) as fed:
        configuration = client.Configuration()
        await config.load_kube_config(config_file=str(kubeconfig), context="origin", client_configuration=configuration)
        async with client.ApiClient(configuration) as api_client:
            log = logging.getLogger("test")
            tracker = CapacityTracker(client.CoreV1Api(api_client), GPUBurstSettings(), log)
            await tracker.start()
            settings = GPUKernelSettings(profiles=[{"slug": "gpu-1", "resource": "nvidia.com/gpu", "count": 1}])
            reg = KernelRegistry(
                tracker, settings, client.CoreV1Api(api_client), client.CustomObjectsApi(api_client), "img", namespace, log
            )
            reg.federation = fed
            try:
                yield reg
            finally:
                for record in list(reg.records.values()):
                    await reg.stop(record, wait=0)
                await tracker.stop()
