"""The hub's kernel registry on the local federation: one ledger with the spawner, bad input
refused before anything is made, other users' kernels invisible, orphans reaped."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest
from helpers.kernels import registry_on_federation

from jupyter_gpuburst.core import images, keys
from jupyter_gpuburst.core.placement import GPURequest, Placement
from jupyter_gpuburst.hub.kernels import manifests
from jupyter_gpuburst.hub.kernels.handlers import record_json
from jupyter_gpuburst.hub.kernels.registry import KernelError
from jupyter_gpuburst.hub.kernels.settings import GPUKernelSettings
from jupyter_gpuburst.sim.testing import wait_until

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"
KEY = "f" * 32


@pytest.fixture
async def registry(tmp_path):
    async with registry_on_federation(tmp_path) as reg:
        yield reg


def kernel_pods(registry) -> list[dict]:
    # every namespace: a donor kernel runs in its donor's kernel namespace
    items, _ = registry.federation.origin.store.list("pods", label_selector=f"{keys.COMPONENT_LABEL}={keys.KERNEL_COMPONENT}")
    return items


async def start(registry, user: str = "alice", **overrides):
    args = dict(
        user=user,
        groups=frozenset(),
        server_name="",
        server_pod=None,
        profile_slug="gpu-1",
        key=KEY,
        signature_scheme="hmac-sha256",
        kernel_id="k1",
        notebook_dir="",
    )
    args.update(overrides)
    return await registry.start(**args)


async def test_a_gpu_promised_to_a_spawning_server_is_never_given_to_a_kernel(registry):
    tracker = registry.tracker
    # a GPU server is being spawned and holds both origin GPUs in the shared ledger
    held = tracker.placer.place("bob/", GPURequest(GPU, 2, "bob"), time.monotonic())
    assert isinstance(held, Placement) and held.site == "origin"
    record = await start(registry)
    assert record.placement.site == "donor-1"

    # held by its reservation until bound, then by its pod in the inventory: never by neither
    def donor_held() -> int:
        reserved = tracker.placer.reservations.on_site("donor-1", GPU)
        return reserved + 8 - tracker.snapshot().site("donor-1").free.get(GPU, 0)

    assert donor_held() == 1
    await wait_until(lambda: tracker.placer.reservations.get(record.key) is None, timeout=20, what="kernel pod bound")
    assert donor_held() == 1
    assert [p["metadata"]["labels"][keys.SITE_LABEL] for p in kernel_pods(registry)] == ["donor-1"]
    # and the capacity report shows the kernel next to servers
    assert tracker.placements()[record.key]["site"] == "donor-1"


@pytest.mark.parametrize(
    ("own_image", "runs"),
    [("", "docker.io/library/img:latest"), ("example.org/own:2", "example.org/own:2")],
    ids=["hub's", "profile's own"],
)
async def test_a_kernel_is_placed_by_the_image_its_pod_runs(registry, monkeypatch, own_image, runs):
    asked = []
    place = registry.tracker.placer.place
    monkeypatch.setattr(
        registry.tracker.placer, "place", lambda key, request, *a, **k: asked.append(request) or place(key, request, *a, **k)
    )
    monkeypatch.setitem(registry.profiles, "gpu-1", dataclasses.replace(registry.profiles["gpu-1"], image=own_image))
    await start(registry)
    (pod,) = kernel_pods(registry)
    # placement prefers a node that has it: the image the pod runs, as runtimes name it
    assert asked and asked[-1].images == images.pod_images(pod["spec"]) == (runs,)


async def test_bad_requests_are_refused_and_create_nothing(registry):
    for overrides, status, words in [
        ({"profile_slug": "gpu-99"}, 400, "unknown GPU kernel profile"),
        ({"key": "short"}, 400, "connection key"),
        ({"signature_scheme": "none"}, 400, "signature scheme"),
        ({"port_set": 2}, 400, "port_set"),
        ({"port_set": True}, 400, "port_set"),
    ]:
        with pytest.raises(KernelError) as info:
            await start(registry, **overrides)
        assert info.value.status == status and words in info.value.message
    assert kernel_pods(registry) == [] and len(registry.tracker.placer.reservations) == 0


async def test_another_users_kernel_reads_as_missing(registry):
    record = await start(registry)
    with pytest.raises(KernelError) as info:
        registry.get("mallory", record.id)
    assert info.value.status == 404
    assert registry.list("mallory") == []
    assert [r.id for r in registry.list("alice")] == [record.id]


async def test_a_user_at_the_kernel_limit_is_told_and_nothing_is_made(registry):
    registry.settings.max_kernels_per_user = 2
    first = await start(registry, kernel_id="k1")
    await start(registry, kernel_id="k2", server_name="other")  # the limit spans the user's servers
    pods_before = len(kernel_pods(registry))
    with pytest.raises(KernelError) as info:
        await start(registry, kernel_id="k3")
    assert info.value.status == 409
    assert info.value.message.startswith("You already have 2 GPU kernels running")
    assert len(kernel_pods(registry)) == pods_before and len(registry.list("alice")) == 2
    # another user is not counted against alice, and a stopped kernel frees a place
    await start(registry, user="bob", kernel_id="b1")
    await registry.stop(first, wait=5)
    third = await start(registry, kernel_id="k3")
    assert third.state in ("pending", "running")


def test_the_kernel_limit_is_not_negative():
    from traitlets import TraitError

    with pytest.raises(TraitError, match="0 \\(no limit\\) or more"):
        GPUKernelSettings(max_kernels_per_user=-1)


async def test_kernels_whose_server_is_gone_are_reaped(registry):
    kept = await start(registry, user="alice")
    orphan = await start(registry, user="carol")
    reaped = await registry.reap(lambda user, server: user == "alice")
    assert reaped == 1
    await wait_until(
        lambda: [p["metadata"]["name"] for p in kernel_pods(registry)] == [kept.pod_name], timeout=20, what="orphan pod deleted"
    )
    assert registry.tracker.placer.reservations.get(orphan.key) is None
    assert orphan.id not in registry.records and kept.id in registry.records


async def test_a_restart_returns_to_its_site_when_it_still_fits(registry):
    tracker = registry.tracker
    # the origin is full when the kernel first starts: it runs on the donor
    held = tracker.placer.place("bob/", GPURequest(GPU, 2, "bob"), time.monotonic())
    assert isinstance(held, Placement) and held.site == "origin"
    first = await start(registry, kernel_id="k1")
    assert first.placement.site == "donor-1"
    await registry.stop(first, wait=5)
    tracker.placer.release("bob/")
    # restarted (same kernel, the old pod gone): back where the hub's record says it ran,
    # though the origin has room now
    record = await start(registry, kernel_id="k1", port_set=1)
    assert record.placement.site == "donor-1" and not record.relocated_from
    # not the profile's rule: it may run on the origin too
    assert record.placement.reason == "Restarted where it ran before; starting on donor-1 (8 of 8 GPUs free there)."
    # another kernel of the same server has no such record: the policy puts it on the origin
    other = await start(registry, kernel_id="k2")
    assert other.placement.site == "origin"
    # the donor is not allowed for the next restart: it is re-placed, and says so
    await registry.stop(record, wait=5)
    registry.profiles["gpu-1"] = registry.profiles["gpu-1"].__class__(
        **{**registry.profiles["gpu-1"].__dict__, "allowed_sites": ("origin",)}
    )
    moved = await start(registry, kernel_id="k1")
    assert moved.placement.site == "origin" and moved.relocated_from == "donor-1"
    (pod,) = [p for p in kernel_pods(registry) if p["metadata"]["name"] == moved.pod_name]
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert "restarted on the origin" in env["JUPYTER_GPUBURST_KERNEL_NOTE"]


async def test_a_start_of_a_kernel_id_again_stops_the_earlier_start_its_server_never_heard_of(registry):
    """A hub killed mid-start: the server's start failed (no answer) and its delete was lost, but
    the pod was made. The server starts the same kernel again: the earlier pod goes, found by
    the kernel id that a restarted hub reads from the pod, and another kernel's stays."""
    lost = await start(registry, kernel_id="k1")
    other = await start(registry, kernel_id="k2")
    (pod,) = [p for p in kernel_pods(registry) if p["metadata"]["name"] == lost.pod_name]
    assert pod["metadata"]["annotations"][keys.JUPYTER_KERNEL_ANNOTATION] == "k1"
    registry.records.clear()  # the hub restarted: its records come back from the pods
    registry._adopt()
    assert registry.records[lost.id].kernel_id == "k1" and registry.records[other.id].kernel_id == "k2"

    again = await start(registry, kernel_id="k1", key="e" * 32)
    live = {r.id for r in registry.list("alice") if registry.state(r) in ("pending", "running")}
    assert live == {other.id, again.id}
    await wait_until(
        lambda: lost.pod_name not in {p["metadata"]["name"] for p in kernel_pods(registry)}, timeout=30, what="the lost start's pod gone"
    )
    names = {p["metadata"]["name"] for p in kernel_pods(registry)}
    assert names == {other.pod_name, again.pod_name}
    # another user's, or another server's, kernel of the same id is not theirs to stop
    await registry.stop(other, wait=0)  # room under the limit of two kernels a user
    bobs = await start(registry, user="bob", kernel_id="k1")
    named = await start(registry, kernel_id="k1", server_name="gpu", key="d" * 32)
    assert {registry.state(r) for r in (again, bobs, named)} <= {"pending", "running"}


async def test_a_site_the_server_names_does_not_outrank_the_policy(registry):
    """The server's code can read its token: a kernel it has never started goes where the
    policy says (the origin, which has room), whatever the server asks."""
    import inspect

    assert "prefer_site" not in inspect.signature(registry.start).parameters
    record = await start(registry, kernel_id="new")
    assert record.placement.site == "origin"


async def test_a_restarted_kernels_pod_listens_on_the_other_ports_and_a_new_hub_reads_them(registry):
    base = registry.settings.base_port
    first = await start(registry, kernel_id="k1")
    restarted = await start(registry, kernel_id="k2", port_set=1)
    await wait_until(lambda: registry.state(first) == registry.state(restarted) == "running", timeout=30, what="both kernels running")
    for record, ports in [(first, range(base, base + 5)), (restarted, range(base + 5, base + 10))]:
        (pod,) = [p for p in kernel_pods(registry) if p["metadata"]["name"] == record.pod_name]
        assert sorted(p["containerPort"] for p in pod["spec"]["containers"][0]["ports"]) == list(ports)
        connection = record_json(registry, record)["connection"]
        assert sorted(v for k, v in connection.items() if k.endswith("_port")) == list(ports)
        assert json.loads(pod["metadata"]["annotations"][manifests.PORTS_ANNOTATION]) == record.ports
    # a hub that starts again rebuilds its records from the pods, ports included
    registry.records.clear()
    registry._adopt()
    adopted = registry.records[restarted.id]
    assert adopted.ports == restarted.ports == registry.settings.ports(1)


async def test_the_admins_hook_changes_the_kernel_pod_and_a_bad_one_makes_nothing(registry):
    seen = []

    async def label_site(pod, placement):
        seen.append(placement.site)
        pod["spec"]["containers"][0]["env"].append({"name": "WHERE", "value": placement.site})
        return pod

    registry.settings.modify_pod_hook = label_site
    record = await start(registry)
    (pod,) = kernel_pods(registry)
    assert seen == [record.placement.site]
    assert {"name": "WHERE", "value": record.placement.site} in pod["spec"]["containers"][0]["env"]
    await registry.stop(record, wait=0)

    registry.settings.modify_pod_hook = lambda pod, placement: None
    with pytest.raises(KernelError) as info:
        await start(registry, user="bob")
    assert info.value.status == 500 and "TypeError" in info.value.message
    assert [p for p in kernel_pods(registry) if "bob" in json.dumps(p["metadata"])] == []
    assert registry.list("bob") == [] and len(registry.tracker.placer.reservations) == 0


async def test_the_files_policy_decides_where_the_kernel_starts(registry, tmp_path):
    from jupyter_gpuburst.hub.kernels.files import KernelFiles

    asked = []

    async def policy(request):
        asked.append(request)
        if request.placement.is_donor:
            return None  # the user's volume cannot follow to a donor: scratch space
        return KernelFiles(working_dir=str(tmp_path / "home" / request.notebook_dir))

    registry.settings.files_policy = policy
    record = await start(registry, notebook_dir="course/../course/week1")
    assert asked[0].notebook_dir == "course/week1" and record.files == "volume"
    (pod,) = kernel_pods(registry)
    container = pod["spec"]["containers"][0]
    assert container["workingDir"] == str(tmp_path / "home" / "course" / "week1")
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["JUPYTER_GPUBURST_KERNEL_FILES"] == "volume" and env["JUPYTER_GPUBURST_KERNEL_NOTE"] == ""

    # the origin's other GPU is taken by bob's kernel; alice's second goes to the donor: scratch
    await start(registry, user="bob")
    donor = await start(registry)
    assert donor.placement.site == "donor-1" and donor.files == "scratch"
    (pod,) = [p for p in kernel_pods(registry) if p["metadata"]["name"] == donor.pod_name]
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert "without your files" in env["JUPYTER_GPUBURST_KERNEL_NOTE"]


def hold(store, node: str, count: int, name: str) -> None:
    """Someone else's pod holding ``count`` GPUs of ``node`` in that cluster."""
    try:
        store.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "others"}})
    except Exception:  # noqa: BLE001 - already there
        pass
    spec = {
        "nodeName": node,
        "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "600"], "resources": {"limits": {GPU: str(count)}}}],
    }
    store.create("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "others"}, "spec": spec})


async def test_a_kernel_stuck_pending_on_a_donor_moves_or_fails_with_the_reason(registry):
    fed = registry.federation
    registry.tracker.settings.donor_pending_grace_seconds = 1.0
    hold(fed.origin.store, "origin-gpu", 2, "origin-hog")  # the origin is full
    donor_store = fed.clusters["donor-1"].store
    for node in ("donor-1-gpu-1", "donor-1-gpu-2"):  # the donor is full behind its grant
        hold(donor_store, node, 4, f"hog-{node}")
    await wait_until(lambda: registry.tracker.snapshot().site("origin").free.get(GPU, 0) == 0, timeout=10, what="origin seen full")
    record = await start(registry)
    assert record.placement.site == "donor-1"  # the grant still shows 8 free
    await registry.wait(record, 60)
    assert record.state == "failed"
    assert "still pending on donor donor-1" in record.error and "No other site can take it" in record.error
    assert kernel_pods(registry) == [] or all(p["metadata"].get("deletionTimestamp") for p in kernel_pods(registry))
    assert registry.tracker.placer.reservations.get(record.key) is None


async def test_a_kernel_pulling_its_image_on_a_donor_past_the_grace_is_not_moved(registry):
    fed = registry.federation
    registry.tracker.settings.donor_pending_grace_seconds = 1.0
    hold(fed.origin.store, "origin-gpu", 2, "origin-hog")  # the origin is full: the kernel goes to the donor
    images = fed.clusters["donor-1"].kubelet.images
    # cold donor nodes, a pull of 3 s: longer than the grace for a pod still unscheduled
    images.settings = dataclasses.replace(images.settings, preloaded=(), bandwidth=images.settings.size_of("img") / 3.0)
    await wait_until(lambda: registry.tracker.snapshot().site("origin").free.get(GPU, 0) == 0, timeout=10, what="origin seen full")
    record = await start(registry)
    assert record.placement.site == "donor-1"
    await registry.wait(record, 60)
    assert record.state == "running", record.error
    assert record.attempts == [] and record.placement.site == "donor-1"


async def test_availability_follows_the_ledger_and_the_policy(registry):
    from dataclasses import replace

    profile = registry.profiles["gpu-1"]
    before = registry.availability(profile, "alice", frozenset())
    assert before == {"origin": 2, "donors": 8, "sites": {"origin": 2, "donor-1": 8}}
    # a kernel being placed holds its GPU: the launcher's figure drops at once
    await start(registry)
    assert registry.availability(profile, "alice", frozenset())["origin"] == 1
    # a site the policy closes to this user counts 0, whatever is free there
    placer = registry.tracker.placer
    placer.policy = replace(placer.policy, user_donor_cap=0)
    assert registry.availability(profile, "alice", frozenset()) == {"origin": 1, "donors": 0, "sites": {"origin": 1, "donor-1": 0}}
    origin_only = replace(profile, allowed_sites=("origin",))
    assert registry.availability(origin_only, "alice", frozenset())["sites"] == {"origin": 1}


def fill_every_site(registry) -> None:
    hold(registry.federation.origin.store, "origin-gpu", 2, "origin-hog")
    hold(registry.federation.origin.store, "donor-1", 8, "donor-hog")


async def sites_seen_full(registry) -> None:
    def full() -> bool:
        snapshot = registry.tracker.snapshot()
        return all(snapshot.site(s).free.get(GPU, 0) == 0 for s in ("origin", "donor-1"))

    await wait_until(full, timeout=10, what="every site seen full")


async def test_a_full_hub_refuses_a_kernel_unless_it_may_queue(registry):
    fill_every_site(registry)
    await sites_seen_full(registry)
    with pytest.raises(KernelError) as info:
        await start(registry)
    assert info.value.status == 503 and registry.tracker.queue_length == 0


async def test_a_kernel_waits_in_the_same_line_as_servers_and_starts_when_its_turn_comes(registry):
    registry.settings.queue_when_full = True
    fill_every_site(registry)
    await sites_seen_full(registry)
    tracker = registry.tracker
    tracker.enqueue("bob/", GPU, 1)  # a server's spawn came first
    record = await start(registry)
    assert record.state == "pending" and record.placement is None
    await wait_until(lambda: record.line is not None, timeout=10, what="the kernel's place in line")
    shown = record_json(registry, record)
    assert shown["queue"]["position"] == 2 and shown["queue"]["basis"] == "unknown"
    assert shown["waiting"] == "a GPU: 2nd in line, wait time unknown"
    assert shown["site"] is None and kernel_pods(registry) == []
    # the server's spawn is placed first; the kernel moves up, and its record says so
    tracker.dequeue("bob/", placed=True)
    await wait_until(lambda: record.line is not None and record.line.position == 1, timeout=10, what="the kernel to move up")
    assert record_json(registry, record)["waiting"].startswith("a GPU: next in line, ")
    registry.federation.origin.store.delete("pods", "others", "origin-hog", grace_period_seconds=0)
    await wait_until(lambda: record.placement is not None, timeout=20, what="the kernel to be placed")
    assert record.placement.site == "origin" and record.line is None
    assert tracker.queue_length == 0
    await wait_until(lambda: len(kernel_pods(registry)) == 1, timeout=10, what="the kernel's pod")
    assert record_json(registry, record)["queue"] is None


async def test_a_queued_kernel_shut_down_leaves_the_line_and_nothing_behind(registry):
    registry.settings.queue_when_full = True
    fill_every_site(registry)
    await sites_seen_full(registry)
    record = await start(registry)
    await wait_until(lambda: registry.tracker.queue_length == 1, timeout=10, what="the kernel to queue")
    await registry.stop(record)
    assert registry.tracker.queue_length == 0 and len(registry.tracker.placer.reservations) == 0
    assert kernel_pods(registry) == [] and record.id not in registry.records
    assert registry.records == {}
    # nothing held for it: a GPU that frees now goes to the next request at once
    registry.federation.origin.store.delete("pods", "others", "origin-hog", grace_period_seconds=0)
    await wait_until(lambda: registry.tracker.snapshot().site("origin").free.get(GPU, 0) == 2, timeout=10, what="the origin free")
    assert (await start(registry, user="bob")).placement.site == "origin"


async def test_a_kernel_that_waits_past_the_start_timeout_fails_with_the_reason(registry):
    registry.settings.queue_when_full = True
    registry.settings.start_timeout = 1.0
    fill_every_site(registry)
    await sites_seen_full(registry)
    record = await start(registry)
    await registry.wait(record, 20)
    assert record.state == "failed"
    assert record.error.startswith("Waited 1 s in the queue without a free GPU.")
    assert record_json(registry, record)["error"] == record.error
    assert registry.tracker.queue_length == 0 and len(registry.tracker.placer.reservations) == 0
    assert kernel_pods(registry) == []


async def test_a_kernel_placed_late_in_its_wait_has_only_the_rest_of_the_start_timeout(registry):
    # the user's server gives up a little after the hub's start_timeout: the hub's own reason
    # must come first, so the wait in line and the pod's start share one start_timeout
    registry.settings.queue_when_full = True
    registry.settings.start_timeout = 4.0
    fill_every_site(registry)
    await sites_seen_full(registry)
    record = await start(registry)
    await wait_until(lambda: time.monotonic() - record.accepted >= 3.5, timeout=10, what="most of the start timeout")
    registry.federation.origin.store.delete("pods", "others", "origin-hog", grace_period_seconds=0)
    await registry.wait(record, 20)
    assert record.state == "failed", record.state
    assert record.placement is not None and "did not start within 4 s on origin" in record.error
    assert time.monotonic() - record.accepted < 4 + 2
