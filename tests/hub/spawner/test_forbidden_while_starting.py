"""A 403 from an API server that has just started is not a refusal: the spawner's client (the
kubernetes_asyncio client KubeSpawner shares, with hub.retry installed) asks /readyz and waits
while it is not ready; a 403 from a ready server stays final and fails at once. First the
client alone, then a hub's spawn, both acting as the hub's ServiceAccount under the shipped RBAC
(the emulator's admin impersonating it, as the emulator's RBAC decides only for others)."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from helpers.federation import pod_of
from kubernetes_asyncio import client, config
from kubernetes_asyncio.client.exceptions import ApiException

from jupyter_gpuburst.hub import readiness, retry
from jupyter_gpuburst.sim.apiserver import ApiServer
from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.kube import deployment, hubaccount
from jupyter_gpuburst.sim.kubeconfig import write_kubeconfig
from jupyter_gpuburst.sim.testing import wait_until

HUB = "system:serviceaccount:jhub:hub"
LOG = logging.getLogger("test.forbidden")


@pytest.fixture
def server(hub_rbac_apiserver):
    return hub_rbac_apiserver


@pytest.fixture
async def hub_api(server, tmp_path):
    """CoreV1Api acting as the hub's ServiceAccount (the emulator's admin impersonating it, as
    ``kubectl --as`` does), with the retry the spawner installs on KubeSpawner's client."""
    path = write_kubeconfig(tmp_path / "kubeconfig", {"sim": server.url}, "sim")
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(path), client_configuration=configuration)
    async with client.ApiClient(configuration) as api_client:
        api_client.set_default_header("Impersonate-User", HUB)
        retry.install(api_client, logger=LOG)
        yield client.CoreV1Api(api_client)


async def restart(server: ApiServer, window_s: float) -> None:
    server.authorizer_sync_s = window_s
    await server.stop()
    await server.start()


async def test_a_403_while_the_server_is_not_ready_is_waited_out(server, hub_api, caplog):
    # a window no load can outlast, ended once the client has met it: a 1.5 s window could end
    # before a loaded machine sent the first request, which then met no 403 to wait out
    await restart(server, 600.0)
    caplog.set_level(logging.INFO, LOG.name)
    listing = asyncio.create_task(hub_api.list_namespaced_pod("jhub"))
    deadline = time.monotonic() + 30
    retried: list[str] = []
    while not retried:
        assert not listing.done(), listing
        assert time.monotonic() < deadline, f"no retry logged in 30 s: {caplog.text}"
        await asyncio.sleep(0.05)
        retried = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Retrying GET /api/v1/namespaces/jhub/pods")]
    assert "HTTP 403" in retried[0] and "(the API server is not ready: /readyz answered 500)" in retried[0]
    await asyncio.sleep(0.5)
    assert not listing.done(), "gave up or went on while the authorizer still refused"
    server.sync_authorizer()
    pods = await asyncio.wait_for(listing, 30)
    assert pods.items == []


async def test_a_write_and_a_raw_read_are_waited_out_too(server, hub_api):
    await restart(server, 1.0)
    # KubeSpawner creates pods; its reflectors read raw (_preload_content=False) responses
    created, raw = await asyncio.gather(
        hub_api.create_namespaced_pod("jhub", {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}),
        hub_api.list_namespaced_pod("jhub", _preload_content=False),
    )
    assert created.metadata.name == "p"
    assert raw.status == 200
    raw.release()


async def test_a_403_from_a_ready_server_is_final_at_once(server, hub_api, caplog):
    caplog.set_level(logging.INFO, LOG.name)
    asked = server.stats["readyz"]
    started = time.monotonic()
    with pytest.raises(ApiException) as refused:
        await hub_api.list_namespaced_secret("jhub")  # not in the hub's grant
    assert time.monotonic() - started < 1.0
    assert refused.value.status == 403
    assert server.stats["readyz"] == asked + 1  # one question, answered ready
    assert not [r for r in caplog.records if r.getMessage().startswith(("Retrying", "Giving up"))], caplog.text
    # and the student reads the clear sentence, the admin the refusal in the log
    assert retry.public_failure(refused.value) == (500, retry.ADMIN_MESSAGE, logging.ERROR)
    assert 'cannot list resource "secrets"' in retry.describe(refused.value)


async def test_a_genuine_gap_right_after_a_restart_fails_once_the_server_is_ready(server, hub_api):
    await restart(server, 1.0)
    started = time.monotonic()
    with pytest.raises(ApiException) as refused:
        await hub_api.list_namespaced_secret("jhub")
    assert refused.value.status == 403
    # waited for readiness, then final, far inside the retry's deadline
    assert 1.0 <= time.monotonic() - started < retry.RetryPolicy().deadline_s / 2


async def test_many_refused_at_once_ask_readyz_together(server, hub_api):
    await restart(server, 1.0)
    asked = server.stats["readyz"]
    started = time.monotonic()
    results = await asyncio.gather(*(hub_api.list_namespaced_pod("jhub") for _ in range(20)))
    elapsed = time.monotonic() - started
    assert all(r.items == [] for r in results)
    # one question for the 20 first 403s, then a "not ready" holds a while: about one question
    # per hold, where asking at each 403 asked 39 times
    questions = server.stats["readyz"] - asked
    assert 1 <= questions <= elapsed / readiness.NOT_READY_HOLDS_S + 1, (questions, elapsed)


# ---- a hub's spawn ---------------------------------------------------------------------------

# every client of the hub's process acts as the hub's ServiceAccount
AS_HUB_CONFIG = f"""
import kubernetes_asyncio.client as _k8s
_init = _k8s.ApiClient.__init__
def _as_hub(self, *args, **kwargs):
    _init(self, *args, **kwargs)
    self.set_default_header("Impersonate-User", {HUB!r})
_k8s.ApiClient.__init__ = _as_hub
"""


def grant_hub(federation, drop_pod_create: bool = False) -> None:
    """The shipped RBAC (deployment.HUB_RBAC) in the origin, the users' namespace ``default``;
    ``drop_pod_create``: an admin's copy whose Role lost ``create`` on pods."""
    store = federation.origin.store
    for namespace in ("jhub",):
        try:
            store.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        except ApiError as exc:
            assert exc.code == 409
    for doc in hubaccount.documents(deployment.HUB_RBAC):
        obj = hubaccount.retarget(doc, deployment.namespaces("default"))
        if drop_pod_create and obj["kind"] == "Role":
            for rule in obj.get("rules") or []:
                if "pods" in rule.get("resources", []):
                    rule["verbs"] = [v for v in rule["verbs"] if v not in ("create", "*")]
        store.create(hubaccount.KINDS[obj["kind"]], obj, obj["metadata"].get("namespace"))


def refused_pod_creates(hub) -> list[str]:
    return [line for line in hub.log().splitlines() if "Retrying POST /api/v1/namespaces/default/pods" in line and "HTTP 403" in line]


def waited_since_spawn(hub, user: str) -> list[str]:
    """The not-ready 403s the hub rode out once ``user``'s spawn had begun."""
    log = hub.log()
    begun = log.find(f"Creating oauth client jupyterhub-user-{user}")
    if begun < 0:
        return []
    return [line for line in log[begun:].splitlines() if "HTTP 403" in line and "the API server is not ready: /readyz answered 500" in line]


@pytest.mark.integration
async def test_a_spawn_rides_out_a_restarted_api_servers_403s(federation, start_hub):
    grant_hub(federation)
    hub = await start_hub(AS_HUB_CONFIG)
    api = federation.origin.api
    api.authorizer_sync_s = 600.0  # until the spawn has met the window: see below
    await api.stop()
    await api.start()
    spawn = asyncio.ensure_future(hub.spawn("alice", {"profile": "gpu1"}))
    # the spawn waits on requests refused 403 (the capacity view's and KubeSpawner's lists,
    # dropped by the restart, or the pod's create), each asked about and retried ...
    await wait_until(lambda: waited_since_spawn(hub, "alice"), 30, "a 403 of the not-ready API server during the spawn")
    await asyncio.sleep(1.0)  # more than the first retries' delays: still waiting, not failed
    assert "could not be created" not in hub.log()
    assert pod_of(federation, "alice") is None
    # ... until the authorizer has the roles: then the spawn goes on, within its own timeouts
    api.sync_authorizer()
    status, body = await spawn
    assert status in (201, 202), body
    await hub.wait_ready("alice")
    assert pod_of(federation, "alice")["spec"]["nodeName"] == "origin-gpu"
    assert "could not be created" not in hub.log()


@pytest.mark.integration
async def test_a_gap_in_the_hubs_grant_still_fails_the_spawn_at_once(federation, start_hub):
    grant_hub(federation, drop_pod_create=True)
    hub = await start_hub(AS_HUB_CONFIG)
    started = time.monotonic()
    status, body = await hub.spawn("bob", {"profile": "gpu1"})
    if status in (201, 202):  # a slow spawn answers 202 and fails in the background
        await wait_until(lambda: "could not be created" in hub.log(), 30, "the spawn's failure")
        message = "The server could not be created; an administrator has been told."
    else:
        message = body["message"]
    assert message == retry.ADMIN_MESSAGE
    # far inside KubeSpawner's own retry of the create (10 s here): one 403, one /readyz, final
    assert time.monotonic() - started < 8
    assert not refused_pod_creates(hub)
    assert 'cannot create resource "pods"' in hub.log()
    assert pod_of(federation, "bob") is None
