"""The per-hub CapacityTracker and its watches, against the emulated API server."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes_asyncio import client, config

from jupyter_gpuburst.core import keys
from jupyter_gpuburst.bench import synthetic
from jupyter_gpuburst.hub.capacity import CapacityTracker, server_key
from jupyter_gpuburst.core.placement import GPURequest, Placement
from jupyter_gpuburst.hub.settings import settings_from_config
from jupyter_gpuburst.sim.apiserver import ApiServer
from jupyter_gpuburst.sim.kubeconfig import write_kubeconfig
from jupyter_gpuburst.sim.store import Store
from jupyter_gpuburst.sim.testing import wait_until
from jupyter_gpuburst.hub.watch import WatchFeed

GPU = "nvidia.com/gpu"


@pytest.fixture
async def api(tmp_path):
    store = Store()
    server = ApiServer(store)
    await server.start()
    path = write_kubeconfig(tmp_path / "kubeconfig", {"sim": server.url}, "sim")
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(path), client_configuration=configuration)
    async with client.ApiClient(configuration) as api_client:
        yield store, client.CoreV1Api(api_client)
    await server.stop()


def store_pod(name, **kwargs):
    pod = synthetic.pod(name, namespace="default", **kwargs)
    pod.pop("status")
    return pod


async def test_tracker_follows_nodes_and_pods_and_releases_on_bind(api):
    store, core = api
    store.create("nodes", synthetic.node("gpu-a", {GPU: 2}))
    tracker = CapacityTracker(core, settings_from_config(None))
    await tracker.start()
    try:
        assert tracker.ready
        assert tracker.snapshot().site("origin").free[GPU] == 2
        store.create("nodes", synthetic.node("donor-1", {GPU: 8}, cluster_id="donor-1"))
        await wait_until(lambda: tracker.snapshot().site("donor-1") is not None, 5, "donor seen")

        key = server_key("ann", "")
        request = GPURequest(GPU, 1, "ann")
        placement = tracker.placer.place(key, request, 0.0)
        assert isinstance(placement, Placement) and placement.site == "origin"
        tracker.note_decision(key, placement, 1)
        assert tracker.placements()[key]["state"] == "pending"

        pod = store_pod("jupyter-ann", gpus={GPU: 1}, site="origin", user="ann")
        pod["metadata"]["annotations"]["hub.jupyter.org/username"] = "ann"
        store.create("pods", pod)
        await wait_until(lambda: tracker.pod("default", "jupyter-ann") is not None, 5, "pod seen")
        assert key in tracker.placer.reservations  # not bound yet: still reserved
        assert tracker.snapshot().site("origin").free[GPU] == 1  # the hold counts until then

        store.mutate("pods", "default", "jupyter-ann", lambda p: p["spec"].__setitem__("nodeName", "gpu-a"))
        await wait_until(lambda: key not in tracker.placer.reservations, 5, "reservation released on bind")
        assert tracker.snapshot().site("origin").free[GPU] == 1
        shown = tracker.placements()[key]
        assert shown["site"] == "origin" and shown["node"] == "gpu-a" and shown["pod"] == "jupyter-ann"

        store.delete("pods", "default", "jupyter-ann", grace_period_seconds=0)
        await wait_until(lambda: tracker.snapshot().site("origin").free[GPU] == 2, 5, "pod gone")
        assert key not in tracker.placements()
    finally:
        await tracker.stop()


async def test_pod_waiters_wake_on_their_pod_only(api):
    store, core = api
    tracker = CapacityTracker(core, settings_from_config(None))
    await tracker.start()
    try:
        waiter = asyncio.ensure_future(tracker.wait_pod_change("default", "p1", 5))
        await asyncio.sleep(0.05)
        store.create("pods", store_pod("p2", site="origin"))
        await asyncio.sleep(0.2)
        assert not waiter.done()
        store.create("pods", store_pod("p1", site="origin"))
        await asyncio.wait_for(waiter, 2)
    finally:
        await tracker.stop()


async def test_relist_turns_missed_changes_into_events(api):
    store, core = api
    store.create("nodes", synthetic.node("a", {GPU: 1}))
    store.create("nodes", synthetic.node("b", {GPU: 1}))
    seen: list[tuple[str, str]] = []
    feed = WatchFeed(core.list_node, lambda t, o: seen.append((t, o["metadata"]["name"])), kind="nodes")
    await feed._relist()
    assert sorted(seen) == [("ADDED", "a"), ("ADDED", "b")]
    seen.clear()
    store.delete("nodes", None, "a")
    store.mutate("nodes", None, "b", lambda n: n["metadata"]["labels"].__setitem__("x", "y"))
    await feed._relist()
    await feed._relist()  # nothing changed since: no events
    assert sorted(seen) == [("DELETED", "a"), ("MODIFIED", "b")]


async def test_watch_recovers_after_the_stream_ends(api):
    store, core = api
    tracker = CapacityTracker(core, settings_from_config(None))
    await tracker.start()
    try:
        store.close_watches()  # what an API server restart or a 410 looks like to the client
        store.create("nodes", synthetic.node("late", {GPU: 4}))
        await wait_until(lambda: (tracker.snapshot().site("origin") or None) is not None, 10, "node seen after relist")
        assert tracker.snapshot().site("origin").free[GPU] == 4
    finally:
        await tracker.stop()


def test_queue_is_first_come_first_served():
    tracker = CapacityTracker(None, settings_from_config(None))
    assert tracker.enqueue("a/") == 1 and tracker.enqueue("b/") == 2 and tracker.enqueue("a/") == 1
    tracker.dequeue("a/")
    assert tracker.queue_position("b/") == 1 and tracker.queue_position("a/") == 0
    assert tracker.queue_length == 1


def test_placements_of_pods_from_before_a_restart():
    tracker = CapacityTracker(None, settings_from_config(None))
    pod = synthetic.pod("jupyter-zoe", node_name="donor-1", gpus={GPU: 1}, site="donor-1", user="zoe")
    pod["metadata"]["labels"][keys.CLUSTER_LABEL] = "donor-1"
    pod["metadata"]["annotations"][keys.REASON_ANNOTATION] = "busy"
    tracker._on_pod_event("ADDED", pod)
    shown = tracker.placements()["zoe/"]
    assert shown == {
        "site": "donor-1", "cluster_id": "donor-1", "node": "donor-1", "resource": GPU, "count": 1,
        "reason": "busy", "attempts": 1, "pod": "jupyter-zoe", "namespace": "jupyter", "state": "running",
    }
