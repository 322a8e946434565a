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
    full = decide(req(4), inventory(local=(1,), donors={"donor-1": 4}, pods=[
        synthetic.pod("held", node_name="liqo-donor-1", gpus={GPU: 4})]).snapshot(), Policy())
    assert isinstance(full, NoCapacity) and not full.never


def test_not_ready_donor_is_said():
    inv = inventory(local=(), donors={"down": 8})
    inv.apply_node_event("MODIFIED", synthetic.node("liqo-down", {GPU: 8}, cluster_id="down", ready=False))
    out = decide(req(1), inv.snapshot(), Policy())
    assert isinstance(out, NoCapacity) and "down is not ready" in out.reason


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
    [{"strategy": "sideways"}, {"max_count": 0}, {"user_donor_cap": -1}, {"donor_latency_penalty": float("nan")},
     {"group_donor_caps": {"g": -2}}],
)
def test_bad_policy_is_refused(kwargs):
    with pytest.raises(ValueError):
        Policy(**kwargs)
