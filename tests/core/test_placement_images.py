"""Placement prefers a node that already has the pod's image, among the nodes that strand as few
GPUs: GPU packing stays the rule, the image breaks its ties, in a bounded look, never across sites;
and the inventory's record of which nodes have which image follows the nodes."""

from __future__ import annotations

import pytest

from jupyter_gpuburst.bench import synthetic
from jupyter_gpuburst.core import fitindex, images
from jupyter_gpuburst.core.inventory import Inventory
from jupyter_gpuburst.core.placement import GPURequest, Placement, PlacementInputError, Placer, Policy, Strategy, decide

GPU = "nvidia.com/gpu"
NOTEBOOK = "quay.io/jupyter/pytorch-notebook:cuda12"
OTHER = "quay.io/jupyter/scipy-notebook:2024-10-07"


def gpu_node(name, gpus, has=(), cluster_id=None):
    node = synthetic.node(name, {GPU: gpus}, cluster_id=cluster_id)
    if has:
        node["status"]["images"] = [{"names": [image], "sizeBytes": 6 * 2**30} for image in has]
    return node


def inventory(*nodes):
    inv = Inventory()
    for node in nodes:
        inv.apply_node_event("ADDED", node)
    return inv


def req(*pod_images, count=1):
    return GPURequest(GPU, count, "ann", images=tuple(images.normalize(i) for i in pod_images))


def test_of_two_equally_good_nodes_the_one_with_the_image_wins():
    snapshot = inventory(gpu_node("gpu-a", 4), gpu_node("gpu-b", 4, has=[NOTEBOOK])).snapshot()
    out = decide(req(NOTEBOOK), snapshot, Policy())
    assert isinstance(out, Placement) and out.node == "gpu-b"
    assert out.reason == "8 of 8 GPUs free on the origin; starting on the origin (node gpu-b, image already there)."
    # without the image in the request, the first fit as before, and no word about images
    out = decide(req(), snapshot, Policy())
    assert out.node == "gpu-a" and "image" not in out.reason


def test_the_reason_says_the_image_is_there_whenever_it_is():
    snapshot = inventory(gpu_node("gpu-a", 4, has=[NOTEBOOK]), gpu_node("gpu-b", 4, has=[NOTEBOOK])).snapshot()
    out = decide(req(NOTEBOOK), snapshot, Policy())
    assert out.node == "gpu-a" and out.reason.endswith("(node gpu-a, image already there).")


def test_a_node_that_strands_fewer_gpus_wins_over_one_with_the_image():
    snapshot = inventory(gpu_node("gpu-big", 8, has=[NOTEBOOK]), gpu_node("gpu-small", 2)).snapshot()
    out = decide(req(NOTEBOOK, count=2), snapshot, Policy())
    assert out.node == "gpu-small" and "image" not in out.reason


def test_a_node_with_all_the_pods_images_wins_else_one_with_its_main_containers():
    snapshot = inventory(
        gpu_node("gpu-a", 4, has=["busybox"]),
        gpu_node("gpu-b", 4, has=[OTHER]),
        gpu_node("gpu-c", 4, has=[NOTEBOOK, OTHER]),
    ).snapshot()
    assert decide(req(NOTEBOOK, OTHER), snapshot, Policy()).node == "gpu-c"
    # nobody has both: the main container's image (the first) decides, not the small one
    assert decide(req(OTHER, "busybox"), snapshot, Policy()).node == "gpu-b"


def test_names_match_the_way_runtimes_report_them():
    # containerd reports Docker Hub images fully qualified; the pod says "busybox"
    snapshot = inventory(gpu_node("gpu-a", 4), gpu_node("gpu-b", 4, has=["docker.io/library/busybox:latest"])).snapshot()
    assert decide(req("busybox"), snapshot, Policy()).node == "gpu-b"


def test_nodes_without_the_image_are_never_read_however_many():
    nodes = [gpu_node(f"gpu-{i:03}", 4, has=[NOTEBOOK] if i == 299 else ()) for i in range(300)]
    snapshot = inventory(*nodes).snapshot()
    calls = []
    fits = lambda slot: calls.append(slot) or True  # noqa: E731
    bits = snapshot.image_slots[images.normalize(NOTEBOOK)]
    assert fitindex.best_fit(snapshot.index, "origin", GPU, {GPU: 1}, fits, (bits,)) == (299, 4, True)
    assert calls == [299]
    assert decide(req(NOTEBOOK), snapshot, Policy()).node == "gpu-299"


def test_the_look_at_nodes_with_the_image_is_bounded(monkeypatch):
    snapshot = inventory(*[gpu_node(f"gpu-{i}", 4) for i in range(5)]).snapshot()
    # slots 1-3 have the image, and only slot 3 takes the pod (as in a grade that straddles it)
    calls = []
    fits = lambda slot: calls.append(slot) or slot in (0, 3, 4)  # noqa: E731
    having = (1 << 1) | (1 << 2) | (1 << 3)
    monkeypatch.setattr(fitindex, "IMAGE_SCAN", 3)
    assert fitindex.best_fit(snapshot.index, "origin", GPU, {GPU: 1}, fits, (having,)) == (3, 4, True)
    monkeypatch.setattr(fitindex, "IMAGE_SCAN", 2)
    calls.clear()
    assert fitindex.best_fit(snapshot.index, "origin", GPU, {GPU: 1}, fits, (having,)) == (0, 4, False)
    assert calls == [1, 2, 0]  # two with the image, then the first fit


def test_a_reservation_holds_the_node_the_image_chose():
    inv = inventory(gpu_node("gpu-a", 1), gpu_node("gpu-b", 1, has=[NOTEBOOK]))
    placer = Placer(Policy(), inv)
    assert placer.place("cat/", req(), now=0.0).node == "gpu-a"
    placer.release("cat/")
    first = placer.place("ann/", req(NOTEBOOK), now=0.0)
    assert first.node == "gpu-b"
    second = placer.place("bob/", GPURequest(GPU, 1, "bob", images=req(NOTEBOOK).images), now=0.0)
    assert second.node == "gpu-a" and "image" not in second.reason


def test_on_a_donor_the_virtual_node_with_the_image_wins():
    snapshot = inventory(
        gpu_node("liqo-donor-1-a", 8, cluster_id="donor-1"),
        gpu_node("liqo-donor-1-b", 8, has=[NOTEBOOK], cluster_id="donor-1"),
    ).snapshot()
    out = decide(req(NOTEBOOK), snapshot, Policy(strategy=Strategy.DONOR_ONLY))
    assert (out.site, out.node) == ("donor-1", "liqo-donor-1-b")
    assert out.reason == "Donor-only policy: starting on donor-1 (16 of 16 GPUs free there, image already there)."


def test_the_site_is_still_chosen_by_policy_never_by_image():
    snapshot = inventory(gpu_node("gpu-a", 4), gpu_node("liqo-donor-1", 8, has=[NOTEBOOK], cluster_id="donor-1")).snapshot()
    assert decide(req(NOTEBOOK), snapshot, Policy()).site == "origin"
    assert "image" not in decide(req(NOTEBOOK), snapshot, Policy()).reason
    assert decide(req(NOTEBOOK), snapshot, Policy(strategy=Strategy.DONOR_FIRST)).site == "donor-1"
    # nor by a donor's order or loss: the donor listed first wins though only the other has it
    snapshot = inventory(
        gpu_node("liqo-donor-1", 8, cluster_id="donor-1"),
        gpu_node("liqo-donor-2", 8, has=[NOTEBOOK], cluster_id="donor-2"),
    ).snapshot()
    out = decide(req(NOTEBOOK), snapshot, Policy(strategy=Strategy.DONOR_ONLY, donor_order=("donor-1", "donor-2")))
    assert out.site == "donor-1"


@pytest.mark.parametrize("bad", [["x"], ("x", 3), "x"])
def test_images_that_are_not_names_are_refused(bad):
    with pytest.raises(PlacementInputError, match="images must be a tuple of image names"):
        decide(GPURequest(GPU, 1, "ann", images=bad), inventory(gpu_node("gpu-a", 4)).snapshot(), Policy())


def test_which_nodes_have_an_image_follows_pulls_and_nodes_that_go():
    inv = inventory(gpu_node("gpu-a", 4), gpu_node("gpu-b", 4, has=[NOTEBOOK]))
    before = inv.snapshot()
    notebook = images.normalize(NOTEBOOK)
    assert before.image_slots[notebook] == 1 << 1
    inv.apply_node_event("MODIFIED", gpu_node("gpu-a", 4, has=[NOTEBOOK, OTHER]))
    inv.apply_node_event("MODIFIED", gpu_node("gpu-b", 4, has=[OTHER]))
    after = inv.snapshot()
    assert after.image_slots[notebook] == 1 << 0 and after.image_slots[images.normalize(OTHER)] == 0b11
    assert before.image_slots[notebook] == 1 << 1  # an earlier snapshot keeps what it saw
    # a node that goes frees its slot; the next node in it has none of its images
    inv.apply_node_event("DELETED", gpu_node("gpu-a", 4))
    inv.apply_node_event("ADDED", gpu_node("gpu-c", 4))
    now = inv.snapshot()
    assert notebook not in now.image_slots and now.image_slots[images.normalize(OTHER)] == 1 << 1
    assert decide(req(NOTEBOOK), now, Policy()).node in ("gpu-b", "gpu-c")
    assert "image" not in decide(req(NOTEBOOK), now, Policy()).reason
