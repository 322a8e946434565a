"""GPUBurstSpawner without a cluster: decisions, pod fields, state, progress, form, settings."""

from __future__ import annotations

import asyncio
import json
import logging
from types import SimpleNamespace
from typing import Any
from unittest.mock import patch

import jsonschema
import kubernetes_validate
import pytest
import yaml
from helpers.spawner import (
    KUBESPAWNER_LABELS,
    PROFILES,
    FakeCustomApi,
    env,
    make_spawner,
    make_tracker,
    manifest_of,
    required_terms,
)
from kubespawner import KubeSpawner
from traitlets.config import Config

from jupyter_gpuburst.bench import synthetic
from jupyter_gpuburst.core import keys, liqo
from jupyter_gpuburst.core.placement import PlacementInputError, Strategy
from jupyter_gpuburst.hub.settings import GPUBurstSettings, settings_from_config
from jupyter_gpuburst.hub.sites.offloading import NamespaceOffloader, OffloadingPermissionError
from jupyter_gpuburst.hub.sites.unschedulable import unschedulable_reason
from jupyter_gpuburst.hub.spawner import GPUBurstSpawner, SpawnRefused
from jupyter_gpuburst.sim.testing import wait_until

K8S = kubernetes_validate.latest_version()


async def test_local_pod_is_pinned_labelled_and_valid(no_cluster):
    tracker = make_tracker()
    spawner = make_spawner(tracker, {"profile": "gpu1"})
    manifest = await manifest_of(spawner)
    kubernetes_validate.validate(manifest, K8S, strict=True)
    (term,) = required_terms(manifest)
    assert term["matchExpressions"] == liqo.local_node_affinity_term()["matchExpressions"]
    assert term["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": ["origin-gpu"]}]
    assert manifest["metadata"]["labels"][keys.SITE_LABEL] == "origin"
    assert keys.CLUSTER_LABEL not in manifest["metadata"]["labels"]
    annotations = manifest["metadata"]["annotations"]
    assert annotations[keys.USER_ANNOTATION] == spawner.user.name
    assert json.loads(annotations[keys.GROUPS_ANNOTATION]) == []
    assert "2 of 2" in annotations[keys.REASON_ANNOTATION]
    assert not manifest["spec"].get("tolerations")
    variables = env(manifest)
    assert variables["JUPYTER_GPUBURST_SITE"]["value"] == "origin"
    assert variables["JUPYTER_GPUBURST_GPU_RESOURCE"]["value"] == "nvidia.com/gpu"
    assert variables["JUPYTER_GPUBURST_NODE"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    # the decision holds a reservation until the pod is bound
    assert spawner.gpuburst_key in tracker.placer.reservations
    assert tracker.placements()[spawner.gpuburst_key]["state"] == "pending"


async def test_donor_pod_tolerates_virtual_node_and_offloads_namespace(no_cluster, liqo_crd_dir):
    tracker = make_tracker(({"origin-gpu": 2},))
    tracker._on_pod_event("ADDED", synthetic.pod("hog", node_name="origin-gpu", gpus={"nvidia.com/gpu": 2}))
    custom = FakeCustomApi()
    spawner = make_spawner(tracker, {"profile": "gpu1"}, NamespaceOffloader(custom))
    manifest = await manifest_of(spawner)
    kubernetes_validate.validate(manifest, K8S, strict=True)
    assert required_terms(manifest) == [liqo.donor_node_affinity_term("donor-1")]
    assert liqo.virtual_node_toleration() in manifest["spec"]["tolerations"]
    assert manifest["metadata"]["labels"][keys.CLUSTER_LABEL] == "donor-1"
    assert env(manifest)["JUPYTER_GPUBURST_CLUSTER"]["value"] == "donor-1"
    assert "All 2 GPUs on the origin are busy" in env(manifest)["JUPYTER_GPUBURST_REASON"]["value"]
    (offloading,) = custom.created
    crd = yaml.safe_load((liqo_crd_dir / "offloading.liqo.io_namespaceoffloadings.yaml").read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == liqo.OFFLOADING_VERSION]
    jsonschema.validate(offloading, version["schema"]["openAPIV3Schema"])
    assert offloading["metadata"]["namespace"] == spawner.namespace
    # ensured once per namespace and process: a second donor spawn creates nothing
    await make_spawner(tracker, {"profile": "donor"}, NamespaceOffloader(custom)).load_user_options()
    assert len(custom.created) == 1


async def test_admin_affinity_terms_are_narrowed_not_replaced(no_cluster):
    tracker = make_tracker()
    admin_term = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
    spawner = make_spawner(tracker, {"profile": "gpu1"}, node_affinity_required=[admin_term])
    manifest = await manifest_of(spawner)
    kubernetes_validate.validate(manifest, K8S, strict=True)
    (term,) = required_terms(manifest)
    assert term["matchExpressions"][0] == admin_term["matchExpressions"][0]
    assert liqo.local_node_affinity_term()["matchExpressions"][0] in term["matchExpressions"]


async def test_cpu_profile_stays_on_the_origin_and_says_so(no_cluster):
    tracker = make_tracker()
    spawner = make_spawner(tracker, {"profile": "cpu"})
    manifest = await manifest_of(spawner)
    kubernetes_validate.validate(manifest, K8S, strict=True)
    assert keys.SITE_LABEL not in manifest["metadata"]["labels"]  # not a GPU pod to account for
    assert required_terms(manifest) == [liqo.local_node_affinity_term()]
    variables = env(manifest)
    assert variables["JUPYTER_GPUBURST_SITE"]["value"] == "origin"
    assert variables["JUPYTER_GPUBURST_NODE"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    assert "JUPYTER_GPUBURST_GPU_RESOURCE" not in variables
    assert not manifest["spec"].get("tolerations")
    assert not tracker.placer.reservations._by_key  # no GPU, nothing reserved
    assert spawner._gb_messages[-1]["message"].startswith("No GPU requested")


async def test_no_capacity_fails_fast_with_reason(no_cluster):
    tracker = make_tracker(donor_gpus=2)
    spawner = make_spawner(tracker, {"profile": "gpu4"})
    with pytest.raises(SpawnRefused) as info:
        await manifest_of(spawner)
    assert info.value.status_code == 503
    assert str(info.value) == "No site can ever start 4 GPUs: the largest node has 2. Choose a smaller profile."


async def test_oversized_profile_is_a_client_error(no_cluster):
    # the tracker's policy comes from the same hub config as the spawner's traits
    config = Config()
    config.GPUBurstSpawner.max_gpus_per_server = 2
    spawner = make_spawner(make_tracker(config=config), {"profile": "gpu4"}, max_gpus_per_server=2)
    with pytest.raises(SpawnRefused) as info:
        await manifest_of(spawner)
    assert info.value.status_code == 400 and "between 1 and 2" in str(info.value)


async def test_profile_allowed_sites_are_respected(no_cluster):
    manifest = await manifest_of(make_spawner(make_tracker(), {"profile": "donor"}))
    assert manifest["metadata"]["labels"][keys.SITE_LABEL] == "donor-1"


async def test_forbidden_offloading_names_the_missing_permission(no_cluster, caplog):
    tracker = make_tracker(({"origin-gpu": 0},))
    spawner = make_spawner(tracker, {"profile": "gpu1"}, NamespaceOffloader(FakeCustomApi(status=403)))
    with pytest.raises(SpawnRefused) as info:
        with caplog.at_level(logging.ERROR):
            await manifest_of(spawner)
    # the student reads one sentence; the admin's log names the missing permission
    assert str(info.value) == "GPUs on donor clusters cannot be used now; an administrator has been told."
    assert f"create namespaceoffloadings.offloading.liqo.io in namespace {spawner.namespace}" in caplog.text
    assert spawner.gpuburst_key not in tracker.placer.reservations


async def test_offloader_accepts_existing_object():
    assert await NamespaceOffloader(FakeCustomApi(status=409)).ensure("ns") is False
    assert await NamespaceOffloader(FakeCustomApi(status=403, exists=True)).ensure("ns") is False
    with pytest.raises(OffloadingPermissionError, match="is Liqo installed"):
        await NamespaceOffloader(FakeCustomApi(status=404)).ensure("ns")


async def test_queue_waits_in_order_and_shows_position(no_cluster):
    tracker = make_tracker(({"origin-gpu": 1},), donor_gpus=0)
    tracker._on_pod_event("ADDED", synthetic.pod("hog", node_name="origin-gpu", gpus={"nvidia.com/gpu": 1}))
    first = make_spawner(tracker, {"profile": "gpu1"}, queue_when_full=True)
    first.user.name = "first"
    second = make_spawner(tracker, {"profile": "gpu1"}, queue_when_full=True)
    second.user = type(first.user)()
    second.user.name, second.user.id, second.user.url = "second", 2, "u"
    task1 = asyncio.ensure_future(manifest_of(first))
    await wait_until(lambda: tracker.queue_length == 1, 5, "the first spawn to queue")
    task2 = asyncio.ensure_future(manifest_of(second))
    await wait_until(lambda: tracker.queue_length == 2, 5, "the second spawn to queue")
    await wait_until(lambda: second._gb_messages, 5, "the second spawn to say its place")
    # nobody has waited yet and no session's end is known: no made-up figure
    assert second._gb_messages[-1]["message"] == "You are 2nd in line for a GPU (wait time unknown)."
    assert 'data-kind="queue" data-headline="true"' in second._gb_messages[-1]["html_message"]
    tracker._on_pod_event("DELETED", synthetic.pod("hog", node_name="origin-gpu", gpus={"nvidia.com/gpu": 1}))
    manifest = await asyncio.wait_for(task1, 5)
    assert manifest["metadata"]["labels"][keys.SITE_LABEL] == "origin"
    await wait_until(lambda: tracker.queue_position("second/") == 1, 5, "the second spawn to move up")
    # the first one's wait is now history: the second one's estimate is based on it
    await wait_until(
        lambda: second._gb_messages[-1]["message"].startswith("You are next in line for a GPU (less than a minute"), 5, "the update"
    )
    assert not task2.done()
    task2.cancel()
    await asyncio.gather(task2, return_exceptions=True)
    assert tracker.queue_length == 0


async def test_queue_gives_up_after_start_timeout(no_cluster):
    tracker = make_tracker(({"origin-gpu": 0},), donor_gpus=0)
    spawner = make_spawner(tracker, {"profile": "gpu1"}, queue_when_full=True, start_timeout=1)
    with pytest.raises(SpawnRefused, match="Waited 1 s in the queue"):
        await manifest_of(spawner)
    assert tracker.queue_length == 0


async def test_state_round_trip_and_restore(no_cluster):
    tracker = make_tracker()
    spawner = make_spawner(tracker, {"profile": "gpu1"})
    await manifest_of(spawner)
    state = spawner.get_state()
    assert state["gpuburst"]["site"] == "origin" and state["gpuburst"]["attempts"] == 1
    restored = make_spawner(tracker)
    restored.load_state(json.loads(json.dumps(state)))
    assert restored.gpuburst_placement["node"] == "origin-gpu"
    assert restored.get_state()["gpuburst"] == state["gpuburst"]
    restored.clear_state()
    assert restored.gpuburst_placement is None


async def test_progress_yields_decision_before_pod_events(no_cluster):
    spawner = make_spawner(make_tracker(), {"profile": "gpu1"}, events_enabled=False)
    await manifest_of(spawner)
    spawner._start_future = asyncio.get_running_loop().create_future()
    spawner._start_future.set_result("http://x")
    events = [event async for event in spawner.progress()]
    assert events and "starting on the origin" in events[0]["message"]


def test_unschedulable_reason_for_any_resource_the_pod_requests():
    def pod(message, requests=None):
        container = {"name": "c", "resources": {"requests": requests or {}, "limits": {"nvidia.com/gpu": "1"}}}
        return {
            "spec": {"containers": [container]},
            "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}]},
        }

    assert unschedulable_reason(pod("0/3 nodes are available: 1 Insufficient nvidia.com/gpu."))
    assert unschedulable_reason(
        pod("0/3 nodes are available: 1 Insufficient cpu, 2 node(s) didn't match Pod's node affinity/selector.", {"cpu": "2"})
    )
    assert unschedulable_reason(pod("0/3 nodes are available: 1 Insufficient memory.", {"memory": "1Gi"}))
    assert unschedulable_reason(pod("0/3 nodes are available: 1 Too many pods."))
    # a resource the pod does not ask for, or a refusal another site would not cure: no move
    assert unschedulable_reason(pod("0/3 nodes are available: 3 Insufficient example.com/fpga.")) is None
    assert unschedulable_reason(pod("0/1 nodes are available: 1 node(s) had untolerated taint {a: b}.")) is None
    # the placed GPU resource counts even when the pod as read does not carry it
    assert unschedulable_reason({"status": pod("0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")["status"]}, "nvidia.com/gpu")
    assert unschedulable_reason({"status": {"phase": "Pending"}}, "nvidia.com/gpu") is None


async def test_form_shows_availability_and_marks_full_profiles(no_cluster):
    tracker = make_tracker(donor_gpus=2)
    spawner = make_spawner(tracker)
    form = await spawner.options_form(spawner)
    assert "Would start on the origin" in form
    assert "origin 2 of 2" in form and "donor-1 2 of 2" in form
    assert 'data-profile="gpu4"' in form and 'data-full="true"' in form and 'data-never="true"' in form
    assert "Never fits: No site can ever start 4 GPUs" in form
    assert 'name="profile"' in form  # KubeSpawner's own form is still there


async def test_with_the_queue_on_a_full_profile_can_be_started_and_says_it_will_wait(no_cluster):
    tracker = make_tracker(({"origin-gpu": 1},), donor_gpus=0)
    tracker._on_pod_event("ADDED", synthetic.pod("hog", node_name="origin-gpu", gpus={"nvidia.com/gpu": 1}))
    tracker.enqueue("someone/", "nvidia.com/gpu", 1)
    queued = await make_spawner(tracker, queue_when_full=True).options_form(None)
    assert 'data-profile="gpu1"\n     data-full="true"\n     data-never="false"\n     data-queues="true">Full now:' in queued
    assert "Start waits in line for a GPU (1 waiting now)." in queued
    # waiting does not help a profile no site can ever take: it stays closed
    assert 'data-profile="gpu4"\n     data-full="true"\n     data-never="true"\n     data-queues="false">Never fits' in queued
    refused = await make_spawner(tracker).options_form(None)
    assert 'data-profile="gpu1"\n     data-full="true"\n     data-never="false"\n     data-queues="false">Full now:' in refused
    assert "Start waits in line" not in refused


async def test_callable_profile_list_keeps_working(no_cluster):
    tracker = make_tracker()
    spawner = make_spawner(tracker, {"profile": "gpu1"})
    spawner.profile_list = lambda s: PROFILES
    form = await spawner.options_form(spawner)
    assert "Would start on the origin" in form
    manifest = await manifest_of(spawner)
    assert manifest["metadata"]["labels"][keys.SITE_LABEL] == "origin"


async def test_form_after_a_refused_spawn_is_the_fresh_form(no_cluster):
    """A refused profile's override stays on the spawner; the form must not inherit it."""
    tracker = make_tracker(donor_gpus=0)
    fresh = await make_spawner(tracker).options_form(None)
    profiles = PROFILES + [
        {"display_name": "MIG", "slug": "mig", "kubespawner_override": {"extra_resource_limits": {"nvidia.com/mig-1g.10gb": "1"}}},
    ]
    spawner = make_spawner(tracker, {"profile": "gpu1"}, profile_list=profiles)
    tracker._on_pod_event("ADDED", synthetic.pod("hog", node_name="origin-gpu", gpus={"nvidia.com/gpu": 2}))
    with pytest.raises(SpawnRefused):
        await manifest_of(spawner)
    assert spawner.extra_resource_limits == {"nvidia.com/gpu": "1"}  # what KubeSpawner left behind
    again = await spawner.options_form(None)
    assert 'data-profile="cpu"' not in again  # CPU only carries no GPU note at all
    assert "Misconfigured" not in again
    assert "1 MIG 1g.10gb slice. Free now: origin 0 of 0" not in again
    tracker._on_pod_event("DELETED", synthetic.pod("hog", node_name="origin-gpu", gpus={"nvidia.com/gpu": 2}))
    assert await make_spawner(tracker).options_form(None) == fresh
    assert 'data-profile="cpu"' not in fresh


def test_settings_translate_into_policy():
    config = Config()
    config.GPUBurstSpawner.strategy = "donor-first"
    config.GPUBurstSpawner.donor_order = ["b", "a"]
    config.GPUBurstSpawner.group_donor_caps = {"students": 4}
    config.GPUBurstSpawner.max_gpus_per_server = 3
    config.GPUBurstSpawner.image = "ignored/by-settings"  # a KubeSpawner trait, not ours
    policy = settings_from_config(config).policy()
    assert policy.strategy is Strategy.DONOR_FIRST
    assert policy.donor_order == ("b", "a")
    assert policy.group_donor_caps == {"students": 4}
    assert policy.max_count == 3
    assert policy.donor_allowlist is None


def test_bad_strategy_is_a_clear_error():
    with pytest.raises(PlacementInputError, match="unknown strategy 'nearest'"):
        GPUBurstSettings(strategy="nearest")


def test_every_policy_knob_has_help():
    for name in GPUBurstSettings.class_trait_names(config=True):
        assert GPUBurstSettings.class_traits()[name].help, name


# what KubeSpawner labels its user pods with, and the tracker takes for one of the hub's servers


def donor_pod(spawner, phase="Pending", conditions=None) -> dict[str, Any]:
    pod = synthetic.pod(
        spawner.pod_name, namespace=spawner.namespace, node_name="donor-1", gpus={"nvidia.com/gpu": 1}, phase=phase, site="donor-1"
    )
    pod["metadata"]["uid"] = "uid-1"
    pod["metadata"]["labels"].update(KUBESPAWNER_LABELS)
    pod["status"]["conditions"] = conditions or []
    return pod


async def test_pod_pending_on_donor_past_grace_is_moved(no_cluster):
    tracker = make_tracker(({"origin-gpu": 0},))
    spawner = make_spawner(tracker, {"profile": "gpu1"}, donor_pending_grace_seconds=0.3)
    await manifest_of(spawner)
    assert spawner._gb_placement.site == "donor-1"
    tracker._on_pod_event("ADDED", donor_pod(spawner))
    why = await asyncio.wait_for(spawner._gb_watch_pod(), 3)
    assert "still pending on donor donor-1" in why


async def test_donor_pod_still_preempting_on_the_origin_past_grace_is_left_to_start(no_cluster):
    # the origin's scheduler nominated the donor's virtual node and evicts placeholders there: the
    # pod is not the donor's yet, and moving it would give up the room its preemption is freeing
    tracker = make_tracker(({"origin-gpu": 0},))
    spawner = make_spawner(tracker, {"profile": "gpu1"}, donor_pending_grace_seconds=0.1)
    await manifest_of(spawner)
    pod = donor_pod(spawner)
    del pod["spec"]["nodeName"]
    pod["status"]["nominatedNodeName"] = "donor-1"
    tracker._on_pod_event("ADDED", pod)
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(spawner._gb_watch_pod(), 1.6)
    # once bound to the virtual node, the donor's grace period applies
    pod["spec"]["nodeName"] = "donor-1"
    tracker._on_pod_event("MODIFIED", pod)
    why = await asyncio.wait_for(spawner._gb_watch_pod(), 3)
    assert "still pending on donor donor-1" in why


async def test_donor_pod_pulling_its_image_past_grace_is_left_to_start(no_cluster):
    # a CUDA image over a donor's WAN takes minutes: the pod has its room, its node is pulling
    tracker = make_tracker(({"origin-gpu": 0},))
    spawner = make_spawner(tracker, {"profile": "gpu1"}, donor_pending_grace_seconds=0.1)
    await manifest_of(spawner)
    pod = donor_pod(spawner)
    pod["status"]["containerStatuses"] = [{"name": "notebook", "ready": False, "state": {"waiting": {"reason": "ContainerCreating"}}}]
    tracker._on_pod_event("ADDED", pod)
    # the watch looks again every 0.5 s: three looks, each past the grace
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(spawner._gb_watch_pod(), 1.6)


async def test_running_donor_pod_is_left_alone(no_cluster):
    tracker = make_tracker(({"origin-gpu": 0},))
    spawner = make_spawner(tracker, {"profile": "gpu1"}, donor_pending_grace_seconds=0.1)
    await manifest_of(spawner)
    tracker._on_pod_event("ADDED", donor_pod(spawner, phase="Running"))
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(spawner._gb_watch_pod(), 0.5)


async def test_failed_scheduling_event_for_the_gpu_triggers_a_move(no_cluster, monkeypatch):
    tracker = make_tracker(({"origin-gpu": 0},))
    spawner = make_spawner(tracker, {"profile": "gpu1"}, donor_pending_grace_seconds=60)
    await manifest_of(spawner)
    tracker._on_pod_event("ADDED", donor_pod(spawner))
    pod = {"kind": "Pod", "name": spawner.pod_name}
    event = {
        "reason": "FailedScheduling",
        "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu.",
        "involvedObject": {**pod, "uid": "uid-1"},
    }
    stale = {**event, "involvedObject": {**pod, "uid": "an-earlier-pod"}}
    # KubeSpawner's event reflector: events of the namespace by key, in the order they arrived
    reflector = SimpleNamespace(resources={"default/stale": stale, "default/bound": scheduled_event(pod, "uid-1")})
    monkeypatch.setattr(GPUBurstSpawner, "event_reflector", property(lambda self: reflector))
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(spawner._gb_watch_pod(), 0.7)
    reflector.resources["default/event"] = event
    why = await asyncio.wait_for(spawner._gb_watch_pod(), 2)
    assert "Insufficient nvidia.com/gpu" in why


def scheduled_event(pod: dict, uid: str) -> dict:
    """The origin scheduler's report that it bound the pod to the donor's virtual node."""
    return {"reason": "Scheduled", "message": "Successfully assigned default/x to donor-1", "involvedObject": {**pod, "uid": uid}}


async def test_the_origins_refusal_read_after_its_preemption_bound_the_pod_is_no_move(no_cluster, monkeypatch):
    # kube-scheduler nominates the virtual node (a warm pool's placeholders hold the room) with
    # PodScheduled=False and reports that refusal as an event; the victims go at once and the pod
    # is bound before the event reaches the hub: it is the origin's, read after the pod is bound
    tracker = make_tracker(({"origin-gpu": 0},))
    spawner = make_spawner(tracker, {"profile": "gpu1"}, donor_pending_grace_seconds=60)
    await manifest_of(spawner)
    tracker._on_pod_event("ADDED", donor_pod(spawner, conditions=[{"type": "PodScheduled", "status": "True"}]))
    pod = {"kind": "Pod", "name": spawner.pod_name}
    refusal = {
        "reason": "FailedScheduling",
        "message": "0/3 nodes are available: 1 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node affinity/selector.",
        "involvedObject": {**pod, "uid": "uid-1"},
    }
    reflector = SimpleNamespace(resources={"default/refusal": refusal})
    monkeypatch.setattr(GPUBurstSpawner, "event_reflector", property(lambda self: reflector))
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(spawner._gb_watch_pod(), 0.7)
    reflector.resources["default/bound"] = scheduled_event(pod, "uid-1")
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(spawner._gb_watch_pod(), 0.7)
    # the donor's own refusal, after the pod is bound there, still moves it
    reflector.resources["default/donor"] = {**refusal, "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."}
    why = await asyncio.wait_for(spawner._gb_watch_pod(), 2)
    assert why == "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."


async def test_progress_closed_by_a_leaving_client_closes_kubespawners_stream(no_cluster):
    spawner = make_spawner(make_tracker(), {"profile": "gpu1"}, events_enabled=False)
    await manifest_of(spawner)
    spawner._start_future = asyncio.get_running_loop().create_future()  # still starting

    async def slow_pod_events():
        await asyncio.sleep(3600)
        yield {"message": "never"}

    inner = slow_pod_events()
    with patch.object(KubeSpawner, "progress", lambda self: inner):
        stream = spawner.progress()
        assert "starting on the origin" in (await stream.__anext__())["message"]
        step = asyncio.ensure_future(stream.__anext__())
        await asyncio.sleep(0.3)  # a step of KubeSpawner's stream is now in flight
        spawner._gb_messages.append({"message": "Redirected: ..."})
        assert (await step)["message"] == "Redirected: ..."
        assert inner.ag_running  # the page's client leaves while that step still runs
        await stream.aclose()
    # closed in order: nothing left for the garbage collector to close mid-step, which
    # failed with "aclose(): asynchronous generator is already running"
    assert not inner.ag_running and inner.ag_frame is None
