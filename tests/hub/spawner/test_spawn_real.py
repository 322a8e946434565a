"""A real JupyterHub running GPUBurstSpawner against the configured cluster.

The hub runs on the machine that runs the tests. It needs two network paths a cluster does not
always offer, so these tests only run when the operator vouches for them by setting
GPUBURST_HUB_CONNECT_URL: user pods reach the hub at that URL, and this machine reaches pod IPs
(the hub checks the server and the proxy forwards to it).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from typing import Any

import kubernetes_validate
import pytest
from helpers.hub import Hub

from jupyter_gpuburst.core import keys, liqo
from jupyter_gpuburst.core.inventory import full_recount

pytestmark = pytest.mark.realcluster

NO_CONNECT_URL = (
    "set GPUBURST_HUB_CONNECT_URL to a URL at which pods reach a hub listening on this machine "
    "(and run where pod IPs are reachable) to run the spawn tests"
)
# What the API server adds to a pod it stores; the rest is what the spawner wrote.
SERVER_SET_METADATA = (
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "managedFields",
    "generation",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)


def hub_config(real_cluster, namespace: str, profiles: list[dict[str, Any]]) -> str:
    timeout = real_cluster.start_timeout
    return f"""
c.JupyterHub.hub_ip = {real_cluster.hub_bind_ip!r}
c.JupyterHub.hub_port = {real_cluster.hub_port}
c.JupyterHub.hub_connect_url = {real_cluster.hub_connect_url!r}
c.KubeSpawner.namespace = {namespace!r}
c.KubeSpawner.image = {real_cluster.image!r}
c.KubeSpawner.cmd = ["jupyterhub-singleuser"]
c.KubeSpawner.start_timeout = {timeout}
c.KubeSpawner.http_timeout = {timeout}
c.KubeSpawner.profile_list = {profiles!r}
c.GPUBurstSettings.gpu_resource_names = ["nvidia.com/gpu", "amd.com/gpu", {real_cluster.gpu_resource!r}]
"""


def gpu_profile(slug: str, real_cluster, allowed_sites: list[str] | None = None) -> dict[str, Any]:
    block: dict[str, Any] = {"resource": real_cluster.gpu_resource, "count": real_cluster.gpu_count}
    if allowed_sites is not None:
        block["allowed_sites"] = allowed_sites
    return {"display_name": slug, "slug": slug, "gpuburst": block}


def raw(response: Any) -> Any:
    return json.loads(response.data)


def free_by_site(core_v1, real_cluster) -> dict[str, int]:
    nodes = raw(core_v1.list_node(_preload_content=False))["items"]
    pods = raw(core_v1.list_pod_for_all_namespaces(_preload_content=False))["items"]
    counts = full_recount(nodes, pods, [real_cluster.gpu_resource], ())
    return {site: per.get(real_cluster.gpu_resource, {}).get("free", 0) for site, per in counts.items()}


@pytest.fixture
async def hub(real_cluster, hub_kubeconfig, tmp_path):
    """Factory: start one hub for the given profiles; stopped (servers first) afterwards."""
    if real_cluster.hub_connect_url is None:
        pytest.skip(NO_CONNECT_URL)
    started: list[Hub] = []

    async def start(namespace: str, profiles: list[dict[str, Any]]) -> Hub:
        workdir = tmp_path / f"hub{len(started)}"
        workdir.mkdir()
        instance = Hub(workdir, hub_kubeconfig, hub_config(real_cluster, namespace, profiles))
        started.append(instance)
        instance.start()
        await instance.wait_up()
        return instance

    yield start
    for instance in started:
        status, users = await instance.api("GET", "/users")
        for user in users if status == 200 else []:
            if user.get("servers"):
                await instance.api("DELETE", f"/users/{user['name']}/server")
        await instance.stop()


def pod_of(core_v1, namespace: str, user: str) -> dict[str, Any] | None:
    pods = raw(core_v1.list_namespaced_pod(namespace, _preload_content=False))["items"]
    ours = [p for p in pods if (p["metadata"].get("annotations") or {}).get(keys.USER_ANNOTATION) == user]
    assert len(ours) <= 1, [p["metadata"]["name"] for p in ours]
    return ours[0] if ours else None


async def wait_gone(core_v1, namespace: str, user: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await asyncio.to_thread(pod_of, core_v1, namespace, user) is None:
            return
        await asyncio.sleep(0.3)
    raise AssertionError(f"the pod of {user} still exists {timeout}s after stop")


def assert_placed_as_decided(core_v1, pod: dict[str, Any], real_cluster) -> tuple[str, dict[str, Any]]:
    """Labels, annotation and env agree, and the pod runs on the kind of node the site names."""
    meta = pod["metadata"]
    site = meta["labels"][keys.SITE_LABEL]
    cluster = meta["labels"].get(keys.CLUSTER_LABEL)
    reason = meta["annotations"][keys.REASON_ANNOTATION]
    assert reason.strip(), "a placement without a reason"
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e for e in container.get("env") or []}
    assert env["JUPYTER_GPUBURST_SITE"]["value"] == site
    assert env["JUPYTER_GPUBURST_REASON"]["value"] == reason
    assert env["JUPYTER_GPUBURST_GPU_RESOURCE"]["value"] == real_cluster.gpu_resource
    assert env["JUPYTER_GPUBURST_GPU_COUNT"]["value"] == str(real_cluster.gpu_count)
    assert env["JUPYTER_GPUBURST_NODE"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert container["resources"]["limits"][real_cluster.gpu_resource] == str(real_cluster.gpu_count)
    node = raw(core_v1.read_node(pod["spec"]["nodeName"], _preload_content=False))
    if site == keys.ORIGIN_SITE:
        assert not liqo.is_virtual_node(node), f"placed on the origin but runs on virtual node {node['metadata']['name']}"
        assert env["JUPYTER_GPUBURST_CLUSTER"]["value"] == ""
    else:
        assert liqo.is_virtual_node(node), f"placed on donor {site} but runs on {node['metadata']['name']}"
        assert liqo.remote_cluster_id(node) == cluster == site
        assert env["JUPYTER_GPUBURST_CLUSTER"]["value"] == cluster
        assert any(t.get("key") == liqo.VIRTUAL_NODE_TAINT_KEY for t in pod["spec"].get("tolerations") or [])
    return site, node


def schema_version(kube_client: Any) -> str:
    """The cluster's own Kubernetes version when kubernetes-validate has its schema, else its latest."""
    from kubernetes import client

    code = client.VersionApi(kube_client).get_code()
    version = f"{code.major}.{code.minor.rstrip('+')}.0"
    try:
        kubernetes_validate.validate({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "probe"}}, version)
    except kubernetes_validate.utils.VersionNotSupportedError:
        return kubernetes_validate.latest_version()
    return version


def assert_valid_manifest(pod: dict[str, Any], version: str) -> None:
    """What the spawner wrote validates against the Kubernetes OpenAPI schema (strict)."""
    manifest = {key: value for key, value in pod.items() if key != "status"}
    manifest["metadata"] = {k: v for k, v in pod["metadata"].items() if k not in SERVER_SET_METADATA}
    kubernetes_validate.validate(manifest, version, strict=True)


async def spawn_and_check(hub, core_v1, real_cluster, namespace: str, slug: str) -> tuple[str, str]:
    user = f"rc-{secrets.token_hex(3)}"
    status, body = await hub.spawn(user, {"profile": slug})
    assert status in (201, 202), body
    await hub.wait_ready(user, timeout=real_cluster.start_timeout + 30)
    pod = await asyncio.to_thread(pod_of, core_v1, namespace, user)
    assert pod is not None, f"no pod of {user} in {namespace}"
    site, _ = await asyncio.to_thread(assert_placed_as_decided, core_v1, pod, real_cluster)
    assert_valid_manifest(pod, await asyncio.to_thread(schema_version, core_v1.api_client))
    code, text = await hub.get_via_proxy(user)
    assert code == 200, text
    status, _ = await hub.api("DELETE", f"/users/{user}/server")
    assert status in (202, 204)
    await wait_gone(core_v1, namespace, user, timeout=120)
    status, model = await hub.api("GET", f"/users/{user}")
    assert status == 200 and not model["servers"], model
    return user, site


async def test_gpu_profile_lands_where_placement_said_and_stop_removes_it(hub, core_v1, real_cluster, test_namespace):
    free = await asyncio.to_thread(free_by_site, core_v1, real_cluster)
    if not any(n >= real_cluster.gpu_count for n in free.values()):
        pytest.skip(f"no site has {real_cluster.gpu_count} {real_cluster.gpu_resource} free now: {free}")
    running = await hub(test_namespace, [gpu_profile("gpu", real_cluster)])
    _, site = await spawn_and_check(running, core_v1, real_cluster, test_namespace, "gpu")
    assert free.get(site, 0) >= real_cluster.gpu_count, f"placed on {site}, which had {free} free"


async def test_donor_only_profile_bursts_to_a_virtual_node(hub, core_v1, custom_objects, real_cluster, test_namespace):
    free = await asyncio.to_thread(free_by_site, core_v1, real_cluster)
    nodes = raw(core_v1.list_node(_preload_content=False))["items"]
    donors = sorted({liqo.remote_cluster_id(n) for n in nodes if liqo.is_virtual_node(n)} - {None})
    assert donors, "no Liqo virtual node in the origin"
    if not any(free.get(d, 0) >= real_cluster.gpu_count for d in donors):
        pytest.skip(f"no donor has {real_cluster.gpu_count} {real_cluster.gpu_resource} free now: {free}")
    running = await hub(test_namespace, [gpu_profile("gpu-donor", real_cluster, allowed_sites=donors)])
    _, site = await spawn_and_check(running, core_v1, real_cluster, test_namespace, "gpu-donor")
    assert site in donors
    offloading = custom_objects.get_namespaced_custom_object(
        liqo.OFFLOADING_GROUP, liqo.OFFLOADING_VERSION, test_namespace, liqo.NAMESPACE_OFFLOADING_PLURAL, liqo.NAMESPACE_OFFLOADING_NAME
    )
    assert offloading["spec"].get("podOffloadingStrategy", "LocalAndRemote") in ("LocalAndRemote", "Remote")
