"""Placement policy: strategies, best fit, donors, caps, reservations, reasons, bad input."""

from __future__ import annotations

import pytest

from jupyter_gpuburst.bench import synthetic
from jupyter_gpuburst.core.inventory import Inventory
from jupyter_gpuburst.core.placement import (
    GPURequest,
    InvalidCount,
    NoCapacity,
    Placement,
    PlacementInputError,
    Placer,
    Policy,
    Strategy,
    UnknownProfile,
    UnknownResource,
    decide,
)

GPU = "nvidia.com/gpu"


def inventory(local=(2,), donors=None, pods=()):
    inv = Inventory()
    for i, gpus in enumerate(local):
        inv.apply_node_event("ADDED", synthetic.node(f"gpu-{i}", {GPU: gpus}))
    for cluster_id, gpus in (donors or {"donor-1": 8}).items():
        inv.apply_node_event("ADDED", synthetic.node(f"liqo-{cluster_id}", {GPU: gpus}, cluster_id=cluster_id))
    for pod in pods:
        inv.apply_pod_event("ADDED", pod)
    return inv


def req(count=1, user="ann", **kw):
    return GPURequest(kw.pop("resource", GPU), count, user, **kw)


def test_local_first_uses_the_origin_while_it_fits():
    out = decide(req(2), inventory().snapshot(), Policy())
    assert isinstance(out, Placement)
    assert (out.site, out.cluster_id, out.node) == ("origin", None, "gpu-0")
    assert out.reason == "2 of 2 GPUs free on the origin; starting on the origin (node gpu-0)."
    assert out.tolerations() == []


def test_local_full_bursts_to_the_donor_with_a_reason():
    pods = [synthetic.pod("busy", node_name="gpu-0", gpus={GPU: 2})]
    out = decide(req(2), inventory(pods=pods).snapshot(), Policy())
    assert isinstance(out, Placement) and out.site == "donor-1" and out.cluster_id == "donor-1"
    assert out.reason == "All 2 GPUs on the origin are busy; starting on donor-1 (8 of 8 GPUs free there)."
    assert "donor donor-1" not in out.reason
    assert out.tolerations()[0]["effect"] == "NoExecute"


def test_an_origin_of_one_busy_gpu_says_so_in_the_singular():
    pods = [synthetic.pod("busy", node_name="gpu-0", gpus={GPU: 1})]
    out = decide(req(1), inventory(local=(1,), pods=pods).snapshot(), Policy())
    assert isinstance(out, Placement) and out.site == "donor-1"
    assert out.reason == "The origin's only GPU is busy; starting on donor-1 (8 of 8 GPUs free there)."


def test_fragmented_local_capacity_is_explained():
    snap = inventory(local=(1, 1)).snapshot()
    out = decide(req(2), snap, Policy())
    assert out.site == "donor-1"
    assert "The origin has 2 of 2 GPUs free, but no single node has 2" in out.reason


def test_best_fit_picks_the_smallest_node_that_fits():
    snap = inventory(local=(8, 2, 4)).snapshot()
    assert decide(req(2), snap, Policy()).node == "gpu-1"
    assert decide(req(3), snap, Policy()).node == "gpu-2"


def test_best_fit_across_donors_uses_latency_and_idle_memory():
    snap = inventory(local=(), donors={"big": 16, "small": 4}).snapshot()
    assert decide(req(4), snap, Policy()).site == "small"
    slow_small = Policy(donor_latency={"small": 100.0})
    assert decide(req(4), snap, slow_small).site == "big"


def test_ordered_donors_come_first():
    snap = inventory(local=(), donors={"a": 4, "b": 4}).snapshot()
    assert decide(req(1), snap, Policy(donor_order=("b", "a"))).site == "b"


@pytest.mark.parametrize(
    "strategy, expected",
    [("local-first", "origin"), ("donor-first", "donor-1"), ("local-only", "origin"), ("donor-only", "donor-1")],
)
def test_strategies(strategy, expected):
    out = decide(req(1), inventory().snapshot(), Policy(strategy=strategy))
    assert out.site == expected


def test_local_only_never_bursts():
    pods = [synthetic.pod("busy", node_name="gpu-0", gpus={GPU: 2})]
    out = decide(req(1), inventory(pods=pods).snapshot(), Policy(strategy=Strategy.LOCAL_ONLY))
    assert isinstance(out, NoCapacity)
    assert "origin 0 of 2 free" in out.reason and "local-only" in out.reason
    assert not out.never and "frees up" in out.reason


def test_allowlists_per_policy_profile_and_request():
    snap = inventory(local=(), donors={"a": 4, "b": 4}).snapshot()
    assert decide(req(1), snap, Policy(donor_allowlist=frozenset({"b"}))).site == "b"
    per_profile = Policy(profile_donors={"hpc": ("a",)}, donor_allowlist=frozenset({"b"}))
    assert decide(req(1, profile="hpc"), snap, per_profile).site == "a"
    assert decide(req(1, allowed_sites=("b",)), snap, Policy()).site == "b"
    out = decide(req(1), snap, Policy(donor_allowlist=frozenset()))
    assert isinstance(out, NoCapacity) and "no donor is allowed" in out.reason


def test_user_and_group_caps_on_donor_gpus():
    pods = [
        synthetic.pod("busy", node_name="gpu-0", gpus={GPU: 2}),
        synthetic.pod("held", node_name="liqo-donor-1", gpus={GPU: 2}, site="donor-1", user="ann", groups=["physics"]),
    ]
    snap = inventory(pods=pods).snapshot()
    capped = decide(req(1), snap, Policy(user_donor_cap=2))
    assert isinstance(capped, NoCapacity) and "limit per user is 2" in capped.reason
    assert decide(req(1, user="bob"), snap, Policy(user_donor_cap=2)).site == "donor-1"
    group = Policy(group_donor_caps={"physics": 3})
    assert isinstance(decide(req(2, user="cy", groups=frozenset({"physics"})), snap, group), NoCapacity)
    assert decide(req(1, user="cy", groups=frozenset({"physics"})), snap, group).site == "donor-1"


def test_reservations_keep_two_spawns_off_the_same_gpus():
    placer = Placer(Policy(), inventory(local=(2,), donors={"donor-1": 2}))
    first = placer.place("ann/", req(2), now=0)
    second = placer.place("bob/", req(2, user="bob"), now=0)
    third = placer.place("cy/", req(1, user="cy"), now=0)
    assert first.site == "origin" and second.site == "donor-1"
    assert isinstance(third, NoCapacity)
    assert "origin 0 of 2 free" in third.reason and "donor-1 0 of 2 free" in third.reason


def test_reservations_expire_and_can_be_released():
    placer = Placer(Policy(), inventory(local=(1,), donors={"d": 0}), ttl_s=10)
    assert placer.place("a", req(1), now=0).site == "origin"
    assert isinstance(placer.place("b", req(1, user="b"), now=5), NoCapacity)
    assert placer.place("b", req(1, user="b"), now=11).site == "origin"  # a's hold expired
    placer.release("b")
    assert len(placer.reservations) == 0
    assert placer.inventory.holds() == 0
    assert placer.inventory.snapshot().site("origin").free[GPU] == 1


def test_replacing_a_spawn_frees_its_own_hold():
    placer = Placer(Policy(), inventory(local=(2,), donors={"d": 0}))
    assert placer.place("a", req(2), now=0).site == "origin"
    assert placer.place("a", req(2), now=1).site == "origin"
    assert len(placer.reservations) == 1


def test_no_donor_peered_is_said():
    inv = Inventory()
    inv.apply_node_event("ADDED", synthetic.node("gpu-0", {GPU: 1}))
    inv.apply_pod_event("ADDED", synthetic.pod("busy", node_name="gpu-0", gpus={GPU: 1}))
    out = decide(req(1), inv.snapshot(), Policy())
    assert isinstance(out, NoCapacity) and "no donor cluster is peered" in out.reason


def test_bigger_than_any_node_is_never_not_full():
    inv = inventory(local=(1, 1), donors={"donor-1": 4})
    out = decide(req(8), inv.snapshot(), Policy())
    assert isinstance(out, NoCapacity) and out.never
    assert out.reason == "No site can ever start 8 GPUs: the largest node has 4. Choose a smaller profile."
    full = decide(
        req(4),
        inventory(local=(1,), donors={"donor-1": 4}, pods=[synthetic.pod("held", node_name="liqo-donor-1", gpus={GPU: 4})]).snapshot(),
        Policy(),
    )
    assert isinstance(full, NoCapacity) and not full.never


def test_not_ready_donor_is_said():
    inv = inventory(local=(), donors={"down": 8})
    inv.apply_node_event("MODIFIED", synthetic.node("liqo-down", {GPU: 8}, cluster_id="down", ready=False))
    out = decide(req(1), inv.snapshot(), Policy())
    assert isinstance(out, NoCapacity) and not out.never
    assert (
        out.reason
        == "No site can start 1 GPU now (the origin has no GPUs; down is unreachable). It frees up when down is back or servers stop."
    )


@pytest.mark.parametrize(
    "request_, error, message",
    [
        (req(1, resource="example.com/fpga"), UnknownResource, "unknown GPU resource 'example.com/fpga'"),
        (req(0), InvalidCount, "between 1 and 16, not 0"),
        (req(-3), InvalidCount, "not -3"),
        (req(10**9), InvalidCount, "between 1 and 16"),
        (GPURequest(GPU, 1.5, "ann"), InvalidCount, "whole number"),  # type: ignore[arg-type]
        (GPURequest(GPU, True, "ann"), InvalidCount, "whole number"),  # type: ignore[arg-type]
        (req(1, profile="mystery"), UnknownProfile, "unknown profile 'mystery'"),
        (GPURequest(GPU, 1, ""), PlacementInputError, "user"),
    ],
)
def test_bad_input_raises_typed_errors(request_, error, message):
    policy = Policy(known_profiles=frozenset({"gpu-1", "gpu-2"}))
    placer = Placer(policy, inventory())
    with pytest.raises(error, match=message):
        decide(request_, placer.inventory.snapshot(), policy)
    with pytest.raises(error, match=message):
        placer.place("ann/", request_, now=0)
    assert len(placer.reservations) == 0 and placer.inventory.holds() == 0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"strategy": "sideways"},
        {"max_count": 0},
        {"user_donor_cap": -1},
        {"donor_latency_penalty": float("nan")},
        {"group_donor_caps": {"g": -2}},
    ],
)
def test_bad_policy_is_refused(kwargs):
    with pytest.raises(ValueError):
        Policy(**kwargs)


# ---- the whole pod: CPU, memory, pod slots and GPUs on one node --------------------------------
GIB = 2**30


def whole(count=1, cpu=8, memory=32, user="ann", profile="gpu-1", **kw):
    return GPURequest(GPU, count, user, profile=profile, resources={"cpu": cpu * 1000, "memory": memory * GIB}, **kw)


def grant(cluster_id, gpus, cpu, memory="64Gi", pods=110):
    return synthetic.node(f"liqo-{cluster_id}", {GPU: gpus}, cluster_id=cluster_id, cpu=str(cpu), memory=memory, pods=pods)


def test_a_donor_granted_gpus_but_too_few_cpus_is_not_chosen_and_says_why():
    inv = Inventory()
    inv.apply_node_event("ADDED", synthetic.node("gpu-0", {GPU: 1}))
    inv.apply_pod_event("ADDED", synthetic.pod("busy", node_name="gpu-0", gpus={GPU: 1}))
    inv.apply_node_event("ADDED", grant("donor-1", 8, 4, memory="8Gi"))
    out = decide(whole(), inv.snapshot(), Policy())
    assert isinstance(out, NoCapacity)
    assert "donor-1: 4 CPU granted, profile gpu-1 needs 8" in out.reason
    assert "origin 0 of 1 free" in out.reason
    inv.apply_node_event("MODIFIED", grant("donor-1", 8, 64, memory="256Gi"))
    assert decide(whole(), inv.snapshot(), Policy()).site == "donor-1"


def test_origin_with_gpus_but_no_cpu_beside_them_bursts_and_names_the_cpu():
    inv = Inventory()
    inv.apply_node_event("ADDED", synthetic.node("gpu-0", {GPU: 4}, cpu="8"))
    inv.apply_node_event("ADDED", synthetic.node("cpu-0", {}, cpu="64"))
    inv.apply_pod_event("ADDED", synthetic.pod("etl", node_name="gpu-0", cpu="6"))
    inv.apply_node_event("ADDED", grant("donor-1", 8, 64, memory="256Gi"))
    out = decide(whole(count=2, cpu=8), inv.snapshot(), Policy())
    assert out.site == "donor-1"
    assert out.reason.startswith("The origin cannot take the server (no node has 8 CPU and 2 GPUs free)")
    assert out.resources == {"cpu": 8000, "memory": 32 * GIB, GPU: 2, "pods": 1}
    local_only = decide(whole(count=2, cpu=8), inv.snapshot(), Policy(strategy="local-only"))
    assert "origin: no node has 8 CPU and 2 GPUs free" in local_only.reason


def test_memory_and_pod_slots_count_too():
    inv = Inventory()
    inv.apply_node_event("ADDED", synthetic.node("gpu-0", {GPU: 4}, memory="16Gi"))
    inv.apply_node_event("ADDED", synthetic.node("gpu-1", {GPU: 8}, pods=1))
    inv.apply_pod_event("ADDED", synthetic.pod("daemon", node_name="gpu-1"))
    inv.apply_node_event("ADDED", grant("donor-1", 0, 64))
    out = decide(whole(memory=32), inv.snapshot(), Policy())
    assert isinstance(out, NoCapacity)
    assert "origin: no node has 32 GiB of memory, 1 pod slot and 1 GPU free" in out.reason
    assert "donor-1: no GPUs granted" in out.reason
    assert decide(whole(memory=8), inv.snapshot(), Policy()).node == "gpu-0"  # gpu-1 has no pod slot left


def test_reservations_hold_cpu_as_well_as_gpus():
    inv = Inventory()
    inv.apply_node_event("ADDED", synthetic.node("gpu-0", {GPU: 8}, cpu="12"))
    inv.apply_node_event("ADDED", synthetic.node("gpu-1", {GPU: 8}, cpu="12"))
    inv.apply_node_event("ADDED", grant("donor-1", 0, 64))
    placer = Placer(Policy(), inv)
    first = placer.place("ann/", whole(cpu=8), now=0)
    second = placer.place("bob/", whole(cpu=8, user="bob"), now=0)
    assert {first.node, second.node} == {"gpu-0", "gpu-1"}  # 7 GPUs free beside the first, but 4 CPU
    third = placer.place("cy/", whole(cpu=8, user="cy"), now=0)
    # 8 CPU are free in all, but 4 beside each node's GPUs
    assert isinstance(third, NoCapacity) and "origin: no node has 8 CPU and 1 GPU free" in third.reason
    site = inv.snapshot().site("origin")
    assert site.total("cpu").reserved == 16000 and site.total("cpu").free == 8000
    placer.release("ann/")
    assert placer.place("cy/", whole(cpu=8, user="cy"), now=0).node == first.node


def test_best_fit_prefers_the_node_that_strands_fewest_gpus_among_those_that_fit_whole():
    inv = Inventory()
    inv.apply_node_event("ADDED", synthetic.node("small-cpu", {GPU: 2}, cpu="4"))
    inv.apply_node_event("ADDED", synthetic.node("four", {GPU: 4}))
    inv.apply_node_event("ADDED", synthetic.node("eight", {GPU: 8}))
    snap = inv.snapshot()
    assert decide(whole(count=2, cpu=8), snap, Policy()).node == "four"
    assert decide(whole(count=2, cpu=2), snap, Policy()).node == "small-cpu"


@pytest.mark.parametrize(
    "resources, error, message",
    [
        ({"example.com/fpga": 1}, UnknownResource, "does not count"),
        ({"cpu": -1}, InvalidCount, "whole number of units"),
        ({"cpu": 0.5}, InvalidCount, "whole number of units"),
        ({GPU: 3}, InvalidCount, "requests 3 nvidia.com/gpu but the request says 1"),
        ({"amd.com/gpu": 1}, PlacementInputError, "one GPU resource"),
    ],
)
def test_bad_whole_pod_requests_are_refused(resources, error, message):
    with pytest.raises(error, match=message):
        decide(GPURequest(GPU, 1, "ann", resources=resources), inventory().snapshot(), Policy())


def test_gpu_only_requests_keep_working():
    out = decide(GPURequest(GPU, 1, "ann"), inventory().snapshot(), Policy())
    assert out.site == "origin" and out.resources == {GPU: 1, "pods": 1}
