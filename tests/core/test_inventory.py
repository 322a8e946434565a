"""Inventory: incremental counts equal a full recount after any event sequence."""

from __future__ import annotations

import copy

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jupyter_gpuburst.bench import synthetic
from jupyter_gpuburst.core import keys
from jupyter_gpuburst.core.inventory import Inventory, full_recount, parse_count, summarize

GPU = "nvidia.com/gpu"
MIG = synthetic.MIG_RESOURCE


def test_counts_allocatable_requested_and_free_per_site():
    inv = Inventory()
    inv.load(
        [
            synthetic.node("gpu-0", {GPU: 2}),
            synthetic.node("cpu-0", {}),
            synthetic.node("liqo-donor-1", {GPU: 8}, cluster_id="donor-1"),
        ],
        [
            synthetic.pod("a", node_name="gpu-0", gpus={GPU: 1}),
            synthetic.pod("b", node_name="liqo-donor-1", gpus={GPU: 3}, site="donor-1", user="ann"),
            synthetic.pod("done", node_name="gpu-0", gpus={GPU: 1}, phase="Succeeded"),
            synthetic.pod("cpu", node_name="cpu-0"),
        ],
    )
    snap = inv.snapshot()
    local, donor = snap.site(keys.ORIGIN_SITE), snap.site("donor-1")
    assert (local.allocatable[GPU], local.requested[GPU], local.free[GPU]) == (2, 1, 1)
    assert (donor.allocatable[GPU], donor.requested[GPU], donor.free[GPU]) == (8, 3, 5)
    assert donor.is_donor and not local.is_donor and donor.cluster_id == "donor-1"
    assert snap.donor_units("user", "ann") == 3
    assert snap.max_free_on_a_node(keys.ORIGIN_SITE, GPU) == 1


@pytest.mark.parametrize(
    "change",
    [
        lambda n: n["status"].update(conditions=[{"type": "Ready", "status": "False"}]),
        lambda n: n["spec"].update(unschedulable=True),
        lambda n: n["spec"].update(taints=[{"key": "maintenance", "effect": "NoSchedule"}]),
        lambda n: n["spec"].update(taints=[{"key": "gone", "effect": "NoExecute"}]),
    ],
    ids=["not-ready", "cordoned", "tainted-noschedule", "tainted-noexecute"],
)
def test_ineligible_nodes_offer_nothing(change):
    inv = Inventory()
    node = synthetic.node("gpu-0", {GPU: 4})
    inv.apply_node_event("ADDED", node)
    assert inv.snapshot().site("origin").free[GPU] == 4
    changed = copy.deepcopy(node)
    change(changed)
    inv.apply_node_event("MODIFIED", changed)
    assert inv.snapshot().site("origin").free.get(GPU, 0) == 0
    assert not inv.snapshot().site("origin").ready


def test_liqo_taint_and_prefer_no_schedule_do_not_block():
    inv = Inventory()
    inv.apply_node_event("ADDED", synthetic.node("v", {GPU: 4}, cluster_id="d1"))
    soft = synthetic.node("soft", {GPU: 2}, taints=[{"key": "x", "effect": "PreferNoSchedule"}])
    inv.apply_node_event("ADDED", soft)
    snap = inv.snapshot()
    assert snap.site("d1").free[GPU] == 4 and snap.site("origin").free[GPU] == 2


def test_snapshot_never_changes_after_it_is_taken():
    inv = Inventory()
    inv.apply_node_event("ADDED", synthetic.node("gpu-0", {GPU: 4}))
    before = inv.snapshot()
    inv.apply_pod_event("ADDED", synthetic.pod("p", node_name="gpu-0", gpus={GPU: 3}))
    inv.apply_node_event("DELETED", synthetic.node("gpu-0", {GPU: 4}))
    assert before.site("origin").free[GPU] == 4
    assert list(before.nodes_with_free("origin", GPU, 4)) == ["gpu-0"]
    assert inv.snapshot().site("origin") is None or inv.snapshot().site("origin").free.get(GPU, 0) == 0


def test_a_deleted_nodes_slot_is_reused_and_old_snapshots_still_name_their_nodes():
    inv = Inventory()
    inv.apply_node_event("ADDED", synthetic.node("gpu-0", {GPU: 4}))
    inv.apply_node_event("ADDED", synthetic.node("gpu-1", {GPU: 2}))
    before = inv.snapshot()
    inv.apply_node_event("DELETED", synthetic.node("gpu-0", {GPU: 4}))
    inv.apply_node_event("ADDED", synthetic.node("gpu-2", {GPU: 4}))
    after = inv.snapshot()
    assert list(before.nodes_with_free("origin", GPU, 4)) == ["gpu-0"]
    assert before.best_fit("origin", GPU, {GPU: 3}) == ("gpu-0", 4, False)
    assert list(after.nodes_with_free("origin", GPU, 4)) == ["gpu-2"]
    assert after.best_fit("origin", GPU, {GPU: 3}) == ("gpu-2", 4, False)
    # the index's bit sets stay as wide as the cluster is, not as its history
    assert sorted(after.names.values()) == ["gpu-1", "gpu-2"] and sorted(after.names) == [0, 1]


def test_snapshots_keep_their_nodes_while_later_events_update_the_table_in_place():
    inv = Inventory()
    for i in range(40):
        inv.apply_node_event("ADDED", synthetic.node(f"gpu-{i}", {GPU: 4}))
    first = inv.snapshot()
    inv.apply_pod_event("ADDED", synthetic.pod("p0", node_name="gpu-0", gpus={GPU: 1}))
    inv.apply_pod_event("ADDED", synthetic.pod("p1", node_name="gpu-0", gpus={GPU: 1}))  # same path again
    second = inv.snapshot()
    inv.apply_pod_event("ADDED", synthetic.pod("p2", node_name="gpu-0", gpus={GPU: 1}))
    inv.apply_node_event("DELETED", synthetic.node("gpu-1", {GPU: 4}))
    third = inv.snapshot()
    assert [s.nodes["gpu-0"].free(GPU) for s in (first, second, third)] == [4, 2, 1]
    assert "gpu-1" in first.nodes and "gpu-1" in second.nodes and "gpu-1" not in third.nodes
    assert len(first.nodes) == len(second.nodes) == 40 and len(third.nodes) == 39


def test_pod_before_its_node_is_counted_when_the_node_arrives():
    inv = Inventory()
    inv.apply_pod_event("ADDED", synthetic.pod("p", node_name="liqo-d", gpus={GPU: 2}, site="d"))
    inv.apply_node_event("ADDED", synthetic.node("liqo-d", {GPU: 8}, cluster_id="d"))
    site = inv.snapshot().site("d")
    assert (site.requested[GPU], site.free[GPU]) == (2, 6)
    assert inv.snapshot().site("origin") is None


def test_mig_and_configured_resources():
    inv = Inventory(resource_names=["amd.com/gpu"], resource_prefixes=["nvidia.com/mig-"])
    inv.apply_node_event("ADDED", synthetic.node("m", {MIG: 7, GPU: 1, "amd.com/gpu": 2}))
    site = inv.snapshot().site("origin")
    assert dict(site.allocatable) == {MIG: 7, "amd.com/gpu": 2}


def test_init_containers_count_like_the_scheduler():
    inv = Inventory()
    pod = synthetic.pod("p", node_name="n", gpus={GPU: 1})
    pod["spec"]["initContainers"] = [{"name": "warm", "image": "x", "resources": {"limits": {GPU: "3"}}}]
    assert inv.pod_requests(pod) == {GPU: 3}


@pytest.mark.parametrize("value, expected", [(2, 2), ("4", 4), (" 8 ", 8), ("1e1", 10)])
def test_parse_count(value, expected):
    assert parse_count(value) == expected


@pytest.mark.parametrize("value", ["1.5", "lots", True, "2Gi"])
def test_parse_count_rejects(value):
    with pytest.raises(ValueError):
        parse_count(value)


def test_malformed_quantity_on_foreign_node_is_skipped():
    inv = Inventory()
    node = synthetic.node("odd", {GPU: 2})
    node["status"]["allocatable"][GPU] = "two"
    inv.apply_node_event("ADDED", node)
    assert inv.snapshot().site("origin").allocatable.get(GPU, 0) == 0


# ---- property: any event sequence ends where a full recount ends -----------------------------
NODE_NAMES = ["n0", "n1", "n2", "liqo-a", "liqo-b"]
POD_NAMES = [f"p{i}" for i in range(8)]

node_event = st.tuples(
    st.just("node"),
    st.sampled_from(["ADDED", "MODIFIED", "DELETED"]),
    st.sampled_from(NODE_NAMES),
    st.fixed_dictionaries({GPU: st.integers(0, 8), MIG: st.integers(0, 7)}),
    st.booleans(),  # ready
    st.booleans(),  # cordoned
)
pod_event = st.tuples(
    st.just("pod"),
    st.sampled_from(["ADDED", "MODIFIED", "DELETED"]),
    st.sampled_from(POD_NAMES),
    st.one_of(st.none(), st.sampled_from(NODE_NAMES)),
    st.fixed_dictionaries({GPU: st.integers(0, 4)}),
    st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(node_event, pod_event), max_size=60))
def test_incremental_equals_full_recount(events):
    inv = Inventory()
    nodes: dict[str, dict] = {}
    pods: dict[str, dict] = {}
    for event in events:
        if event[0] == "node":
            _, kind, name, gpus, ready, cordoned = event
            cluster_id = name.split("-", 1)[1] if name.startswith("liqo-") else None
            obj = synthetic.node(name, gpus, cluster_id=cluster_id, ready=ready, unschedulable=cordoned)
            if kind == "DELETED":
                if name not in nodes:
                    continue
                obj = nodes.pop(name)
            else:
                nodes[name] = obj
            inv.apply_node_event(kind, obj)
        else:
            _, kind, name, node_name, gpus, phase = event
            site = node_name.split("-", 1)[1] if node_name and node_name.startswith("liqo-") else None
            obj = synthetic.pod(name, node_name=node_name, gpus=gpus, phase=phase, site=site, user="u")
            if kind == "DELETED":
                if name not in pods:
                    continue
                obj = pods.pop(name)
            else:
                pods[name] = obj
            inv.apply_pod_event(kind, obj)
    assert summarize(inv.snapshot()) == full_recount(nodes.values(), pods.values())
    # the best-fit buckets agree with per-node free counts
    snap = inv.snapshot()
    for name, node in snap.nodes.items():
        for resource in (GPU, MIG):
            free = node.free(resource)
            if free > 0:
                assert name in set(snap.nodes_with_free(node.site, resource, free))
