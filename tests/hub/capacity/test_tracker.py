"""The per-hub CapacityTracker and its watches, against the emulated API server."""

from __future__ import annotations

import asyncio

import pytest

from jupyter_gpuburst.bench import synthetic
from jupyter_gpuburst.core import keys
from jupyter_gpuburst.core.placement import GPURequest, Placement
from jupyter_gpuburst.hub.capacity.ownership import PodOwnership
from jupyter_gpuburst.hub.capacity.tracker import CapacityTracker, server_key
from jupyter_gpuburst.hub.capacity.watch import WatchFeed
from jupyter_gpuburst.hub.settings import settings_from_config
from jupyter_gpuburst.sim.testing import wait_until

GPU = "nvidia.com/gpu"


# what KubeSpawner labels its user pods with, and the tracker takes for one of the hub's servers
KUBESPAWNER_LABELS = {"component": "singleuser-server", "app.kubernetes.io/managed-by": "kubespawner"}


def store_pod(name, **kwargs):
    pod = synthetic.pod(name, namespace="default", **kwargs)
    pod["metadata"]["labels"].update(KUBESPAWNER_LABELS)
    pod.pop("status")
    return pod


async def test_tracker_follows_nodes_and_pods_and_releases_on_bind(api_server):
    store, _, core = api_server
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


async def test_pod_waiters_wake_on_their_pod_only(api_server):
    store, _, core = api_server
    tracker = CapacityTracker(core, settings_from_config(None))
    await tracker.start()
    try:
        # its own timeout far beyond the wait below: woken by p1's event, not by running out
        waiter = asyncio.ensure_future(tracker.wait_pod_change("default", "p1", 60))
        await asyncio.sleep(0.05)
        store.create("pods", store_pod("p2", site="origin"))
        await asyncio.sleep(0.2)
        assert not waiter.done()
        store.create("pods", store_pod("p1", site="origin"))
        await asyncio.wait_for(waiter, 30)  # the watch brings the event, late on a loaded machine
    finally:
        await tracker.stop()


async def test_relist_turns_missed_changes_into_events(api_server):
    store, _, core = api_server
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


async def test_watch_recovers_after_the_stream_ends(api_server):
    store, _, core = api_server
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
    tracker = CapacityTracker(None, settings_from_config(None), ownership=PodOwnership(["jupyter"]))
    pod = synthetic.pod("jupyter-zoe", node_name="donor-1", gpus={GPU: 1}, site="donor-1", user="zoe")
    pod["metadata"]["labels"].update(KUBESPAWNER_LABELS)
    pod["metadata"]["labels"][keys.CLUSTER_LABEL] = "donor-1"
    pod["metadata"]["annotations"][keys.REASON_ANNOTATION] = "busy"
    tracker._on_pod_event("ADDED", pod)
    shown = tracker.placements()["zoe/"]
    assert shown == {
        "site": "donor-1",
        "cluster_id": "donor-1",
        "node": "donor-1",
        "resource": GPU,
        "count": 1,
        "reason": "busy",
        "attempts": 1,
        "pod": "jupyter-zoe",
        "namespace": "jupyter",
        "state": "running",
    }


def test_forged_pod_in_another_namespace_is_only_gpu_usage():
    """A tenant's pod dressed as alice's server neither shows as hers nor ends her reservation."""
    tracker = CapacityTracker(None, settings_from_config(None), ownership=PodOwnership(["jupyter"]))
    tracker._on_node_event("ADDED", synthetic.node("gpu-a", {GPU: 4}))
    key = server_key("alice", "")
    placement = tracker.placer.place(key, GPURequest(GPU, 1, "alice"), 0.0)
    assert isinstance(placement, Placement)
    tracker.note_decision(key, placement, 1)

    forged = synthetic.pod("jupyter-alice", namespace="tenant-x", node_name="gpu-a", gpus={GPU: 2}, site="origin", user="alice")
    forged["metadata"]["labels"].update(KUBESPAWNER_LABELS)
    forged["metadata"]["annotations"][keys.REASON_ANNOTATION] = "attacker-chosen text"
    tracker._on_pod_event("ADDED", forged)

    assert key in tracker.placer.reservations  # still held: the forged pod is not her server
    shown = tracker.placements()[key]
    assert shown["state"] == "pending" and shown["reason"] != "attacker-chosen text"
    assert tracker.pod("tenant-x", "jupyter-alice") is None
    # its GPUs are in use all the same: 4 - 2 forged - 1 reserved (free counts reservations)
    assert tracker.placer.reservations.on_site("origin", GPU) == 1
    assert tracker.snapshot().site("origin").free[GPU] == 1

    # the same pod in the hub's namespace without KubeSpawner's labels is not a server either
    unlabelled = synthetic.pod("jupyter-alice", namespace="jupyter", node_name="gpu-a", gpus={GPU: 1}, site="origin", user="alice")
    tracker._on_pod_event("ADDED", unlabelled)
    assert key in tracker.placer.reservations and tracker.pod("jupyter", "jupyter-alice") is None

    # the real one, in the hub's namespace with KubeSpawner's labels, releases the reservation
    real = synthetic.pod("jupyter-alice", namespace="jupyter", node_name="gpu-a", gpus={GPU: 1}, site="origin", user="alice")
    real["metadata"]["labels"].update(KUBESPAWNER_LABELS)
    tracker._on_pod_event("MODIFIED", real)
    assert key not in tracker.placer.reservations
    assert tracker.placements()[key]["namespace"] == "jupyter"


def test_ownership_follows_the_spawner_config():
    from traitlets.config import Config

    config = Config()
    config.KubeSpawner.namespace = "jhub"
    config.KubeSpawner.enable_user_namespaces = True
    config.GPUBurstSpawner.component_label = "gpu-server"
    owner = PodOwnership.from_config(config)
    labels = {"component": "gpu-server", "app.kubernetes.io/managed-by": "kubespawner"}

    def pod(namespace, **extra):
        return {"metadata": {"namespace": namespace, "labels": {**labels, **extra}}}

    assert owner.owns(pod("jhub")) and owner.owns(pod("jhub-alice"))
    assert not owner.owns(pod("tenant-x")) and not owner.owns(pod("jhub-alice-x.y"))
    assert not owner.owns(pod("jhub", component="singleuser-server"))
    assert not owner.owns(pod("jhub", **{"app.kubernetes.io/managed-by": "helm"}))
    # the GPU kernels each donor runs beside the servers' namespace, and beside a user's, from
    # the start: a restarted hub counts them before anything asks its kernel registry
    kernel = {"component": "gpuburst-kernel"}
    assert owner.owns(pod("jhub-kernels-donor-1", **kernel)) and owner.owns(pod("jhub-alice-kernels-donor-1", **kernel))
    assert not owner.owns(pod("tenant-x-kernels-donor-1", **kernel)) and not owner.owns(pod("jhub-kernels-", **kernel))
    assert not owner.owns(pod("jhub-kernels-donor-1", component="worker"))
    # kept apart from the users' namespaces: one namespace's RBAC alone still narrows the watch
    assert PodOwnership.from_config(Config()).namespace_patterns == []
    # a Liqo donor's copy of an offloaded pod, in the remapped namespace
    donor_view = PodOwnership(["jhub"], origin_cluster_id="origin-1")
    assert donor_view.owns(
        {
            "metadata": {
                "namespace": "jhub-origin-1",
                "labels": {"component": "singleuser-server", "app.kubernetes.io/managed-by": "kubespawner"},
            }
        }
    )


async def test_without_cluster_wide_pod_read_it_counts_its_namespace_only(api_server):
    """A hub bound a namespaced Role (docs/security.md) still works, for its namespace's GPUs."""
    from kubernetes_asyncio.client.exceptions import ApiException

    store, _, core = api_server
    store.create("nodes", synthetic.node("gpu-a", {GPU: 4}))
    store.create("pods", store_pod("mine", node_name="gpu-a", gpus={GPU: 1}))
    store.create("namespaces", {"metadata": {"name": "tenant-x"}})
    other = synthetic.pod("theirs", namespace="tenant-x", node_name="gpu-a", gpus={GPU: 2})
    other.pop("status")
    store.create("pods", other)

    class NamespacedOnly:
        """What a Role in 'default' allows: nodes (ClusterRole), pods of 'default' only."""

        list_node = core.list_node
        list_namespaced_pod = core.list_namespaced_pod

        async def list_pod_for_all_namespaces(self, **kwargs):
            raise ApiException(status=403, reason="Forbidden")

    tracker = CapacityTracker(NamespacedOnly(), settings_from_config(None), ownership=PodOwnership(["default"]))
    await tracker.start()
    try:
        assert tracker.ready
        # the tenant's 2 GPUs are not seen: what narrowing costs
        assert tracker.snapshot().site("origin").free[GPU] == 3
    finally:
        await tracker.stop()

    many = CapacityTracker(NamespacedOnly(), settings_from_config(None), ownership=PodOwnership(["a", "b"]))
    with pytest.raises(ApiException):
        await many.start()  # several namespaces: no silent narrowing
    await many.stop()
