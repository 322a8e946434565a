"""Fixtures shared across folders: the local federation, a real hub in front of it, the API emulator alone."""

from __future__ import annotations

import pytest
from kubernetes_asyncio import client, config

from helpers.hub import Hub
from jupyter_gpuburst.sim.apiserver import ApiServer
from jupyter_gpuburst.sim.kubeconfig import write_kubeconfig
from jupyter_gpuburst.sim.store import Store
from jupyter_gpuburst.sim.testing import running_federation


@pytest.fixture
async def federation(tmp_path):
    """The default local federation (origin 1 GPU node x 2; donor-1 granting 8), with a kubeconfig."""
    kubeconfig = tmp_path / "kubeconfig"
    async with running_federation(state_dir=tmp_path / "sim", kubeconfig=kubeconfig) as fed:
        fed.kubeconfig_path = kubeconfig
        yield fed


@pytest.fixture
async def start_hub(federation, tmp_path):
    """Factory: start a hub with extra config lines; every hub is stopped afterwards."""
    hubs: list[Hub] = []

    async def start(extra_config: str = "") -> Hub:
        workdir = tmp_path / f"hub{len(hubs)}"
        workdir.mkdir()
        hub = Hub(workdir, federation.kubeconfig_path, extra_config)
        hubs.append(hub)
        hub.start()
        await hub.wait_up()
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
