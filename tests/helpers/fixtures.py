"""Fixtures shared across folders: the local federation, a real hub in front of it, the API emulator alone."""

from __future__ import annotations

import pytest
from hub_config.readme import apply_rbac_manifest
from kubernetes_asyncio import client, config

from helpers.hub import Hub
from helpers.kubetier import hub_kubeconfig, kube_federation, kube_federation_pool, on_kube
from jupyter_gpuburst.sim.apiserver import ApiServer
from jupyter_gpuburst.sim.kubeconfig import write_kubeconfig
from jupyter_gpuburst.sim.store import Store
from jupyter_gpuburst.sim.testing import running_federation

__all__ = ["api_server", "federation", "hub_rbac_apiserver", "kube_federation_pool", "start_hub"]


@pytest.fixture
async def federation(tmp_path, tmp_path_factory, kube_federation_pool, request):
    """The default local federation (origin 1 GPU node x 2; donor-1 granting 8), with a kubeconfig;
    on the real control plane with ``GPUBURST_CONTROL_PLANE=kube`` (the kube tier)."""
    if on_kube():
        async with kube_federation(tmp_path, tmp_path_factory, kube_federation_pool, request) as fed:
            yield fed
        return
    kubeconfig = tmp_path / "kubeconfig"
    async with running_federation(state_dir=tmp_path / "sim", kubeconfig=kubeconfig) as fed:
        fed.kubeconfig_path = kubeconfig
        yield fed


@pytest.fixture
async def start_hub(federation, tmp_path):
    """Factory: start a hub with extra config lines; every hub is stopped afterwards. On the real
    control plane the hub acts as its ServiceAccount, bound only by the deployment's RBAC."""
    hubs: list[Hub] = []
    kubeconfig = hub_kubeconfig(federation, tmp_path) if on_kube() else federation.kubeconfig_path

    async def start(extra_config: str = "") -> Hub:
        workdir = tmp_path / f"hub{len(hubs)}"
        workdir.mkdir()
        hub = Hub(workdir, kubeconfig, extra_config, admin_kubeconfig=federation.kubeconfig_path)
        hubs.append(hub)
        hub.start()
        await hub.wait_up(timeout=120 if on_kube() else 60)
        return hub

    yield start
    for hub in hubs:
        await hub.stop()


@pytest.fixture
async def api_server(tmp_path):
    """The API emulator alone (no kubelet, no scheduler): its store, the server, and a CoreV1Api
    client configured from a kubeconfig, as the hub's own clients are."""
    store = Store()
    server = ApiServer(store)
    await server.start()
    path = write_kubeconfig(tmp_path / "kubeconfig", {"sim": server.url}, "sim")
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(path), client_configuration=configuration)
    async with client.ApiClient(configuration) as api_client:
        yield store, server, client.CoreV1Api(api_client)
    await server.stop()


@pytest.fixture
async def hub_rbac_apiserver():
    """The API emulator alone, its store holding namespace ``jhub`` and what hub_config/rbac.yaml
    grants the hub's ServiceAccount there (requests impersonating it are judged by RBAC)."""
    store = Store()
    store.create("namespaces", {"metadata": {"name": "jhub"}})
    apply_rbac_manifest(store, "jhub")
    server = ApiServer(store)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()
