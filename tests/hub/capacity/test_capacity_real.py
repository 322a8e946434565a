"""The hub's CapacityTracker, fed by real node and pod watches, agrees with a full recount."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from typing import Any

import pytest

from jupyter_gpuburst.core.inventory import full_recount, summarize
from jupyter_gpuburst.hub.capacity.tracker import CapacityTracker
from jupyter_gpuburst.hub.settings import GPUBurstSettings

pytestmark = pytest.mark.realcluster

log = logging.getLogger(__name__)


@pytest.fixture
async def tracker(real_cluster):
    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    await config.load_kube_config(
        config_file=str(real_cluster.kubeconfig), context=real_cluster.context, client_configuration=configuration
    )
    async with client.ApiClient(configuration) as api_client:
        settings = GPUBurstSettings()
        if real_cluster.gpu_resource not in settings.gpu_resource_names:
            settings.gpu_resource_names = [*settings.gpu_resource_names, real_cluster.gpu_resource]
        tracker = CapacityTracker(client.CoreV1Api(api_client), settings, log)
        await tracker.start()
        try:
            yield tracker
        finally:
            await tracker.stop()


def recount(core_v1: Any, settings: GPUBurstSettings) -> dict:
    nodes = json.loads(core_v1.list_node(_preload_content=False).data)["items"]
    pods = json.loads(core_v1.list_pod_for_all_namespaces(_preload_content=False).data)["items"]
    return full_recount(nodes, pods, settings.gpu_resource_names, settings.gpu_resource_prefixes)


async def assert_agrees(tracker: CapacityTracker, core_v1: Any, timeout: float = 15.0) -> dict:
    """The tracker equals a recount from fresh list calls (retried: a live cluster keeps moving)."""
    deadline = time.monotonic() + timeout
    while True:
        expected = await asyncio.to_thread(recount, core_v1, tracker.settings)
        actual = summarize(tracker.snapshot())
        if actual == expected:
            return actual
        if time.monotonic() > deadline:
            raise AssertionError(f"watch-fed inventory {actual} != full recount {expected}")
        await tracker.wait_change(0.5)


def gpu_pod(name: str, real_cluster) -> dict:
    limits = {real_cluster.gpu_resource: str(real_cluster.gpu_count)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/part-of": "jupyter-gpuburst-tests"}},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "hold",
                    "image": real_cluster.test_image,
                    "command": ["sleep", "600"],
                    "resources": {"limits": limits, "requests": limits},
                }
            ],
        },
    }


async def wait_scheduling_decided(core_v1: Any, namespace: str, name: str, timeout: float = 30.0) -> dict:
    """The pod once the scheduler has bound it or said why not."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pod = (await asyncio.to_thread(core_v1.read_namespaced_pod, name, namespace)).to_dict()
        if pod["spec"].get("node_name"):
            return pod
        conditions = (pod.get("status") or {}).get("conditions") or []
        if any(c["type"] == "PodScheduled" and c["status"] == "False" for c in conditions):
            return pod
        await asyncio.sleep(0.2)
    raise AssertionError(f"the scheduler did not decide about {namespace}/{name} in {timeout}s")


async def wait_pod_gone(core_v1: Any, namespace: str, name: str, timeout: float = 60.0) -> None:
    from kubernetes.client.exceptions import ApiException

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            await asyncio.to_thread(core_v1.read_namespaced_pod, name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                return
            raise
        await asyncio.sleep(0.2)
    raise AssertionError(f"pod {namespace}/{name} still exists after {timeout}s")


async def test_watch_fed_inventory_equals_full_recount(tracker, core_v1):
    summary = await assert_agrees(tracker, core_v1)
    assert tracker.ready
    # a Liqo-peered origin has at least one donor site, whatever it grants
    assert any(site.is_donor for site in tracker.snapshot().sites.values()), dict(tracker.snapshot().sites)
    assert summary == summarize(tracker.snapshot())


async def test_inventory_follows_a_gpu_pod_through_its_life(tracker, core_v1, test_namespace, real_cluster):
    name = f"gpuburst-hold-{secrets.token_hex(3)}"
    await asyncio.to_thread(core_v1.create_namespaced_pod, test_namespace, gpu_pod(name, real_cluster))
    try:
        pod = await wait_scheduling_decided(core_v1, test_namespace, name)
        during = await assert_agrees(tracker, core_v1)
        node = pod["spec"].get("node_name")
        seen = tracker.snapshot().nodes.get(node) if node else None
        if seen is not None and seen.eligible:
            # bound: the watch has already counted its GPUs on the node's site
            assert seen.requested.get(real_cluster.gpu_resource, 0) >= real_cluster.gpu_count
            assert during[seen.site][real_cluster.gpu_resource]["requested"] >= real_cluster.gpu_count
    finally:
        await asyncio.to_thread(core_v1.delete_namespaced_pod, name, test_namespace, grace_period_seconds=0)
    await wait_pod_gone(core_v1, test_namespace, name)
    await assert_agrees(tracker, core_v1)
