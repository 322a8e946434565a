"""GPUBurstSpawner in a real JupyterHub (``spawner_class = "gpuburst"``) against the local federation."""

from __future__ import annotations

import asyncio
import time

import pytest
from helpers.federation import DONOR, SLEEPER, env_of, messages, occupy, pod_of, release
from helpers.hub import ADMIN_KUBECONFIG_ENV

from jupyter_gpuburst.core import keys, liqo
from jupyter_gpuburst.sim.testing import wait_until

pytestmark = pytest.mark.integration


def steal_hook(limits: dict[str, str]) -> str:
    """Config: after the decision (the manifest is built, the pod not yet created) someone
    else's pod takes ``limits`` of the origin GPU node, so the scheduler finds the pinned node short."""
    return f"""
import os
from kubernetes_asyncio import client, config
_stolen = []
async def steal(spawner, pod):
    if not _stolen and pod.spec.node_name is None:
        _stolen.append(1)
        # someone else: the cluster's admin, not the hub (whose RBAC reaches no other namespace)
        async with await config.new_client_from_config(os.environ[{ADMIN_KUBECONFIG_ENV!r}]) as admin:
            api = client.CoreV1Api(admin)
            try:
                await api.create_namespace({{"metadata": {{"name": "others"}}}})
            except Exception:
                pass
            await api.create_namespaced_pod("others", {{"metadata": {{"name": "thief"}}, "spec": {{
                "nodeName": "origin-gpu",
                "containers": [{{"name": "c", "image": "busybox", "command": {SLEEPER!r},
                                 "resources": {{"limits": {limits!r}}}}}]}}}})
    return pod
c.KubeSpawner.modify_pod_hook = steal
"""


# both origin GPUs
STEAL_HOOK = steal_hook({"nvidia.com/gpu": "2"})


async def test_local_free_lands_on_origin_gpu_node(federation, start_hub):
    hub = await start_hub()
    status, body = await hub.spawn("alice", {"profile": "gpu1"})
    assert status in (201, 202), body
    await hub.wait_ready("alice")
    pod = pod_of(federation, "alice")
    assert pod["spec"]["nodeName"] == "origin-gpu"
    assert pod["metadata"]["labels"][keys.SITE_LABEL] == keys.ORIGIN_SITE
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"] == liqo.local_node_affinity_term()["matchExpressions"]
    env = env_of(pod)
    assert env["JUPYTER_GPUBURST_SITE"]["value"] == "origin"
    assert env["JUPYTER_GPUBURST_GPU_COUNT"]["value"] == "1"
    assert env["JUPYTER_GPUBURST_NODE"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    code, _ = await hub.get_via_proxy("alice")
    assert code == 200
    # the profile is ours to apply: JupyterHub does not call it unhandled
    assert "unhandled user_options" not in hub.log_path.read_text()


async def test_cpu_profile_stays_on_the_origin(federation, start_hub):
    hub = await start_hub()
    status, body = await hub.spawn("carol", {"profile": "cpu"})
    assert status in (201, 202), body
    await hub.wait_ready("carol")
    pod = pod_of(federation, "carol")
    assert keys.SITE_LABEL not in pod["metadata"]["labels"]
    assert env_of(pod)["JUPYTER_GPUBURST_SITE"]["value"] == keys.ORIGIN_SITE
    assert not pod["spec"]["nodeName"].startswith("liqo-") and pod["spec"]["nodeName"] != DONOR


async def test_local_full_bursts_to_donor_and_is_reachable(federation, start_hub):
    occupy(federation, "origin-gpu", 2, "hog")
    hub = await start_hub('c.JupyterHub.tornado_settings = {"slow_spawn_timeout": 0.2}')
    status, body = await hub.spawn("bob", {"profile": "gpu1"})
    assert status == 202, body
    events = messages(await hub.progress("bob"))
    decision = next(i for i, m in enumerate(events) if "All 2 GPUs on the origin are busy" in m)
    assert "starting on donor-1 (8 of 8 GPUs free there)" in events[decision]
    # runtime noise stays out; an image pull is shown (":latest" is pulled on every start, as on a cluster)
    assert not [m for m in events if "Started container" in m or "already present" in m], events
    pod_events = [i for i, m in enumerate(events) if "Successfully assigned" in m]
    assert pod_events and decision < pod_events[0], events
    await hub.wait_ready("bob")
    pod = pod_of(federation, "bob")
    assert pod["spec"]["nodeName"] == DONOR
    assert pod["metadata"]["labels"][keys.SITE_LABEL] == DONOR
    assert pod["metadata"]["labels"][keys.CLUSTER_LABEL] == DONOR
    assert "All 2 GPUs on the origin are busy" in pod["metadata"]["annotations"][keys.REASON_ANNOTATION]
    assert any(t["key"] == liqo.VIRTUAL_NODE_TAINT_KEY for t in pod["spec"]["tolerations"])
    offloading = federation.origin.store.get(
        f"{liqo.NAMESPACE_OFFLOADING_PLURAL}.{liqo.OFFLOADING_GROUP}", "default", liqo.NAMESPACE_OFFLOADING_NAME
    )
    assert offloading["spec"]["podOffloadingStrategy"] == "LocalAndRemote"
    assert env_of(pod)["JUPYTER_GPUBURST_CLUSTER"]["value"] == DONOR
    code, text = await hub.get_via_proxy("bob")
    assert code == 200, text


async def test_capacity_stolen_after_decision_is_redirected_to_donor(federation, start_hub):
    hub = await start_hub(STEAL_HOOK)
    seen: dict[str, float] = {}

    async def observe() -> None:
        # the store's own watch: every state the pod passes through, however brief
        watch = federation.origin.store.watch("pods", "default")
        first_uid = None
        try:
            async for etype, pod in watch:
                if pod["metadata"]["name"] != "jupyter-dave":
                    continue
                uid = pod["metadata"]["uid"]
                first_uid = first_uid or uid
                if uid != first_uid and etype == "ADDED":
                    seen["replacement"] = time.monotonic()
                    return
                for cond in pod.get("status", {}).get("conditions") or []:
                    if cond.get("reason") == "Unschedulable":
                        seen.setdefault("unschedulable", time.monotonic())
        finally:
            watch.close()

    watcher = asyncio.ensure_future(observe())
    try:
        status, body = await hub.spawn("dave", {"profile": "gpu1"})
        assert status in (201, 202), body
        await hub.wait_ready("dave")
        await asyncio.wait_for(watcher, 5)
    finally:
        watcher.cancel()
    pod = pod_of(federation, "dave")
    assert pod["spec"]["nodeName"] == DONOR
    assert pod["metadata"]["annotations"][keys.ATTEMPTS_ANNOTATION] == "2"
    redirect_s = seen["replacement"] - seen["unschedulable"]
    # the spawner's own move, not KubeSpawner's 60 s start timeout; the 2 s goal is the redirect
    # benchmark's to judge, as a loaded machine's hub may take longer
    assert 0 <= redirect_s <= 15.0, seen
    status, user = await hub.api("GET", "/users/dave")
    assert user["servers"][""]["ready"]
    code, _ = await hub.get_via_proxy("dave")
    assert code == 200
    assert "Redirected: the origin could not schedule" in hub.log_path.read_text()


async def test_memory_taken_after_decision_is_redirected_to_donor(federation, start_hub):
    # placement counted the origin node's memory as free; another pod takes all of it first
    hub = await start_hub(steal_hook({"memory": "64Gi"}) + '\nc.KubeSpawner.mem_guarantee = "1G"')
    status, body = await hub.spawn("dora", {"profile": "gpu1"})
    assert status in (201, 202), body
    await hub.wait_ready("dora")
    pod = pod_of(federation, "dora")
    assert pod["spec"]["nodeName"] == DONOR
    assert pod["metadata"]["annotations"][keys.ATTEMPTS_ANNOTATION] == "2"
    assert "Redirected: the origin could not schedule" in hub.log_path.read_text()
    assert "Insufficient memory" in hub.log_path.read_text()


async def test_redirects_exhausted_fail_with_what_was_tried(federation, start_hub):
    hub = await start_hub(STEAL_HOOK + "\nc.GPUBurstSpawner.max_redirects = 0")
    status, body = await hub.spawn("hank", {"profile": "gpu1"})
    assert status >= 400, body
    assert "Tried 1 site(s): origin (0/3 nodes are available" in body["message"], body
    assert "Gave up after 0 redirect(s)" in body["message"]
    await wait_until(lambda: pod_of(federation, "hank") is None, 10, "failed pod removed")


async def test_nothing_free_fails_fast_with_the_reason(federation, start_hub):
    occupy(federation, "origin-gpu", 2, "hog")
    occupy(federation, DONOR, 8, "donor-hog")
    hub = await start_hub()
    started = time.monotonic()
    status, body = await hub.spawn("erin", {"profile": "gpu1"})
    assert status >= 400, body
    assert "origin 0 of 2 free" in body["message"] and "donor-1 0 of 8 free" in body["message"], body
    assert "donor donor-1" not in body["message"] and "frees up" in body["message"], body
    assert time.monotonic() - started < 10
    assert pod_of(federation, "erin") is None


async def test_nothing_free_queues_when_configured(federation, start_hub):
    occupy(federation, "origin-gpu", 2, "hog")
    occupy(federation, DONOR, 8, "donor-hog")
    hub = await start_hub('c.GPUBurstSpawner.queue_when_full = True\nc.JupyterHub.tornado_settings = {"slow_spawn_timeout": 0.5}')
    status, body = await hub.spawn("frank", {"profile": "gpu1"})
    assert status == 202, body
    progress = asyncio.ensure_future(hub.progress("frank"))
    await asyncio.sleep(1.5)
    assert pod_of(federation, "frank") is None  # still waiting, nothing created
    release(federation, "hog")
    await hub.wait_ready("frank")
    events = await asyncio.wait_for(progress, 30)
    assert "You are next in line for a GPU (wait time unknown)." in messages(events), messages(events)
    assert pod_of(federation, "frank")["spec"]["nodeName"] == "origin-gpu"


async def test_spawn_form_shows_live_availability_and_full_profiles(federation, start_hub):
    occupy(federation, "origin-gpu", 2, "hog")
    occupy(federation, DONOR, 7, "donor-hog")
    hub = await start_hub()
    page = await hub.spawn_page("ivy")
    assert 'id="profile-item-gpu1"' in page  # KubeSpawner's own form is kept
    assert "Free now: origin 0 of 2, donor-1 1 of 8. Would start on donor-1." in page
    assert (
        'data-profile="gpu2"\n     data-full="true"\n     data-never="false"\n     data-queues="false">Full now: No site can start 2 GPUs now'
        in page
    )
    assert 'data-profile="gpu1-local"\n     data-full="true"\n     data-never="false"\n     data-queues="false">Full now:' in page


async def test_hub_restart_keeps_donor_server_manageable(federation, start_hub):
    occupy(federation, "origin-gpu", 2, "hog")
    hub = await start_hub()
    status, body = await hub.spawn("gina", {"profile": "gpu1"})
    assert status in (201, 202), body
    await hub.wait_ready("gina")
    uid = pod_of(federation, "gina")["metadata"]["uid"]
    await hub.stop()
    hub.start()
    await hub.wait_up()
    status, user = await hub.api("GET", "/users/gina")
    server = user["servers"][""]
    assert server["ready"], user
    assert server["state"]["gpuburst"]["site"] == DONOR
    assert server["state"]["gpuburst"]["cluster_id"] == DONOR
    assert pod_of(federation, "gina")["metadata"]["uid"] == uid  # poll() on startup kept it
    code, _ = await hub.get_via_proxy("gina")
    assert code == 200
    status, _ = await hub.api("DELETE", "/users/gina/server")
    assert status in (202, 204)
    await wait_until(lambda: pod_of(federation, "gina") is None, 30, "pod deleted")


FORGED = [
    ({"profile": "gpu1", "node_selector": {"kubernetes.io/hostname": "origin-gpu"}}, "node_selector"),
    ({"profile": "gpu1", "tolerations": [liqo.virtual_node_toleration()]}, "tolerations"),
    ({"profile": "cpu", "image": "evil/image"}, "image"),
    ({"profile": "gpu1", "extra_resource_limits": {"nvidia.com/gpu": "8"}}, "extra_resource_limits"),
    ({"profile": "gpu1", "site": DONOR}, "site"),
    ({"profile": "no-such-profile"}, "unknown profile"),
    ({"profile": ["gpu1"]}, "profile"),
]


async def test_forged_user_options_are_refused(federation, start_hub):
    hub = await start_hub()
    for options, needle in FORGED:
        status, body = await hub.spawn("mallory", options)
        assert status == 400, (options, body)
        assert needle in body["message"], (options, body)
        assert pod_of(federation, "mallory") is None
        status, user = await hub.api("GET", "/users/mallory")
        assert not user["servers"], user
