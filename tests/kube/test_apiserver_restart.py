"""kube-apiserver restarted under the hub: for a moment it refuses the hub's permitted requests
with 403 while /readyz says it is not ready (its RBAC authorizer has not read the roles), and
the hub's client (hub.retry with hub.readiness, as the spawner installs it) rides that out;
a 403 of a ready server, a gap in the grant, stays final at once."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from jupyter_gpuburst.hub import retry
from jupyter_gpuburst.sim.kube import binaries, deployment
from jupyter_gpuburst.sim.kube.controlplane import ControlPlane
from jupyter_gpuburst.sim.kube.remotestore import RemoteStore

pytestmark = pytest.mark.kube
LOG = logging.getLogger("test.kube.restart")
NOT_READY = "(the API server is not ready: /readyz answered"


class Site:
    """A control plane alone, as deployment.hub_kubeconfig needs a site."""

    def __init__(self, control_plane: ControlPlane) -> None:
        self.control_plane = control_plane
        self.name = control_plane.name
        self.url = control_plane.url
        self.store: RemoteStore | None = None

    def credentials(self) -> tuple[str, str, str]:
        cp = self.control_plane
        return str(cp.pki.ca), str(cp.harness_cert.cert), str(cp.harness_cert.key)


@pytest.fixture
async def site(tmp_path):
    if not binaries.available():
        pytest.skip("the real control plane is not built here (`make kube`)")
    async with ControlPlane("origin", tmp_path / "control-plane") as control_plane:
        site = Site(control_plane)
        site.store = RemoteStore(site.url, site.credentials(), ())
        await site.store.start()
        try:
            yield site
        finally:
            await site.store.stop()


@pytest.fixture
async def hub_api(site, tmp_path):
    kubeconfig = deployment.hub_kubeconfig(site, tmp_path, users="default")
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    async with client.ApiClient(configuration) as api_client:
        # the hub's retry, its delays kept short so that the test's requests keep coming
        # through the restart (at the default's they may sleep through a 2 s window)
        retry.install(api_client, retry.RetryPolicy(base_s=0.05, max_delay_s=0.2), logger=LOG)
        yield client.CoreV1Api(api_client)


# kube-apiserver does not always show the window: 3 of 7 restarts here (load 5-10) answered 200
# from their first request, the roles read before it served. Each restart below must fail
# nothing, and they go on until one has shown the window, so that the test has met it
# (at 3 in 7, twelve restarts without one come 1 in 25,000 runs).
RESTARTS = 12


async def restart_under_requests(site: Site, hub_api: client.CoreV1Api) -> None:
    """kube-apiserver killed and started again while 4 callers make a request the hub may make,
    one after another, until it is ready again: none may fail."""
    await site.control_plane.kill_process("kube-apiserver")
    restarted = asyncio.ensure_future(site.control_plane.start_process("kube-apiserver"))

    async def poll() -> None:
        while not restarted.done():
            await hub_api.list_namespaced_pod("default")
            await asyncio.sleep(0.02)

    polled = await asyncio.gather(*(poll() for _ in range(4)), return_exceptions=True)
    await restarted
    assert not [p for p in polled if isinstance(p, BaseException)], polled


async def test_the_hubs_requests_ride_out_a_restarted_apiservers_403s(site, hub_api, caplog):
    caplog.set_level(logging.INFO, LOG.name)
    await hub_api.list_namespaced_pod("default")  # granted

    def waited() -> list[str]:
        return [r.getMessage() for r in caplog.records if "HTTP 403" in r.getMessage() and NOT_READY in r.getMessage()]

    for _ in range(RESTARTS):
        await restart_under_requests(site, hub_api)
        if waited():
            break
    # the window was met: 403s, /readyz not ready, retried, and no request failed
    assert waited(), f"no restart of {RESTARTS} refused a request while not ready"
    # a gap in the grant is still refused, at once: the hub may not read kube-system's secrets
    started = time.monotonic()
    with pytest.raises(ApiException) as refused:
        await hub_api.list_namespaced_secret("kube-system")
    assert refused.value.status == 403
    assert time.monotonic() - started < 5
    assert retry.public_failure(refused.value) == (500, retry.ADMIN_MESSAGE, logging.ERROR)
