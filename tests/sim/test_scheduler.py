"""The emulated kube-scheduler: filters, kube-scheduler's wording, event-driven binding and retry."""

from __future__ import annotations

import kubernetes_validate
import pytest

from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.sim.cluster import node_object
from jupyter_gpuburst.sim.config import NodeConfig
from jupyter_gpuburst.sim.peering import virtual_node_object
from jupyter_gpuburst.sim.scheduler import Scheduler, schedule_one
from jupyter_gpuburst.sim.store import Store
from jupyter_gpuburst.sim.testing import wait_for_pod, wait_until

NOW = "2026-01-01T00:00:00Z"


def node(name: str, gpus: int = 0, cpu: str = "8", labels: dict | None = None, ip: str = "127.10.0.9") -> dict:
    return node_object(
        name, NodeConfig(name=name, cpu=cpu, resources={"nvidia.com/gpu": gpus} if gpus else {}, labels=labels or {}), ip, NOW
    )


def pod(name: str = "p", gpus: int = 0, cpu: str | None = None, **spec) -> dict:
    limits = {}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    if cpu:
        limits["cpu"] = cpu
    container = {"name": "c", "image": "busybox", "command": ["sleep", "1000"], "resources": {"limits": limits, "requests": dict(limits)}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"containers": [container], **spec},
    }


def affinity(*exprs: dict) -> dict:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": list(exprs)}]}}}


def test_issue_example_wording_with_virtual_node_and_insufficient_gpus():
    nodes = [node("gpu", 2), node("cpu"), virtual_node_object("donor-1", {"nvidia.com/gpu": "8"}, "127.10.0.50", NOW)]
    chosen, message = schedule_one(pod(gpus=4), nodes, [])
    assert chosen is None
    assert message == (
        f"0/3 nodes are available: 1 node(s) had untolerated taint {{{liqo.VIRTUAL_NODE_TAINT_KEY}: {liqo.VIRTUAL_NODE_TAINT_VALUE}}}, "
        "2 Insufficient nvidia.com/gpu. preemption: 0/3 nodes are available: 1 Preemption is not helpful for scheduling, "
        "2 No preemption victims found for incoming pod."
    )


def test_toleration_lets_pod_onto_virtual_node_and_affinity_pins_it():
    nodes = [node("gpu", 2), virtual_node_object("donor-1", {"nvidia.com/gpu": "8"}, "127.10.0.50", NOW)]
    p = pod(
        gpus=4,
        tolerations=[liqo.virtual_node_toleration()],
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [liqo.donor_node_affinity_term("donor-1")]}
            }
        },
    )
    assert schedule_one(p, nodes, [])[0] == "donor-1"
    local = pod(
        gpus=1,
        tolerations=[liqo.virtual_node_toleration()],
        affinity={
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [liqo.local_node_affinity_term()]}}
        },
    )
    assert schedule_one(local, nodes, [])[0] == "gpu"


@pytest.mark.parametrize(
    ("expr", "fits"),
    [
        ({"key": "zone", "operator": "In", "values": ["a", "b"]}, True),
        ({"key": "zone", "operator": "In", "values": ["b"]}, False),
        ({"key": "zone", "operator": "NotIn", "values": ["a"]}, False),
        ({"key": "other", "operator": "NotIn", "values": ["a"]}, True),
        ({"key": "zone", "operator": "Exists"}, True),
        ({"key": "zone", "operator": "DoesNotExist"}, False),
        ({"key": "rank", "operator": "Gt", "values": ["3"]}, True),
        ({"key": "rank", "operator": "Lt", "values": ["3"]}, False),
    ],
)
def test_required_node_affinity_operators(expr, fits):
    nodes = [node("n", labels={"zone": "a", "rank": "5"})]
    chosen, message = schedule_one(pod(affinity=affinity(expr)), nodes, [])
    assert (chosen == "n") is fits
    if not fits:
        assert "1 node(s) didn't match Pod's node affinity/selector" in message


def test_node_selector_cordon_and_not_ready():
    cordoned = node("a")
    cordoned["spec"]["unschedulable"] = True
    not_ready = node("b")
    not_ready["status"]["conditions"][-1]["status"] = "False"
    other = node("c", labels={"disk": "hdd"})
    chosen, message = schedule_one(pod(nodeSelector={"disk": "ssd"}), [cordoned, not_ready, other], [])
    assert chosen is None
    assert message.startswith(
        "0/3 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) had untolerated taint "
        "{node.kubernetes.io/not-ready: }, 1 node(s) were unschedulable."
    )


def test_resources_count_non_terminal_pods_only_and_cpu_fits():
    nodes = [node("n", 2, cpu="2")]
    bound = pod("old", gpus=2)
    bound["spec"]["nodeName"] = "n"
    assert schedule_one(pod(gpus=1), nodes, [bound])[1].startswith("0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")
    bound["status"] = {"phase": "Succeeded"}
    assert schedule_one(pod(gpus=1), nodes, [bound])[0] == "n"
    _, message = schedule_one(pod(gpus=3, cpu="3"), nodes, [])
    assert "1 Insufficient cpu, 1 Insufficient nvidia.com/gpu." in message


def test_mig_resources_are_extended_resources():
    nodes = [node_object("mig", NodeConfig(name="mig", resources={"nvidia.com/mig-1g.10gb": 7}), "127.10.0.9", NOW)]
    p = pod()
    p["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/mig-1g.10gb": "7"}, "requests": {"nvidia.com/mig-1g.10gb": "7"}}
    assert schedule_one(p, nodes, [])[0] == "mig"
    p["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/mig-1g.10gb"] = "8"
    assert "Insufficient nvidia.com/mig-1g.10gb" in schedule_one(p, nodes, [])[1]


@pytest.fixture
async def cluster_store():
    store = Store()
    s = Scheduler(store, backoff_initial_s=0.2, backoff_max_s=0.4)
    await s.start()
    try:
        yield store
    finally:
        await s.stop()


async def test_binds_on_creation_and_records_scheduled(cluster_store):
    store = cluster_store
    store.create("nodes", node("n", 1))
    store.create("pods", pod("fast", gpus=1), "default")
    # the scheduler has no periodic pass: only the pod's creation can wake it to bind
    bound = await wait_for_pod(store, "default", "fast", lambda p: p["spec"].get("nodeName"), timeout=10)
    assert bound["status"]["conditions"][0] == {
        "type": "PodScheduled",
        "status": "True",
        "lastTransitionTime": bound["status"]["conditions"][0]["lastTransitionTime"],
    }
    events, _ = store.list("events", "default", field_selector="involvedObject.name=fast")
    assert [e["reason"] for e in events] == ["Scheduled"]


async def test_unschedulable_condition_event_and_retry_when_capacity_frees(cluster_store):
    store = cluster_store
    store.create("nodes", node("n", 1))
    store.create("pods", pod("first", gpus=1), "default")
    await wait_for_pod(store, "default", "first", lambda p: p["spec"].get("nodeName"), timeout=10)
    store.create("pods", pod("second", gpus=1), "default")
    waiting = await wait_for_pod(
        store, "default", "second", lambda p: any(c.get("reason") == "Unschedulable" for c in p["status"].get("conditions", [])), timeout=10
    )
    cond = waiting["status"]["conditions"][0]
    assert cond["type"] == "PodScheduled" and cond["status"] == "False"
    assert cond["message"].startswith("0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")
    events, _ = store.list("events", "default", field_selector="involvedObject.name=second,reason=FailedScheduling")
    assert events and events[0]["type"] == "Warning" and events[0]["reportingComponent"] == "default-scheduler"
    assert events[0]["eventTime"] and not events[0].get("lastTimestamp")
    store.delete("pods", "default", "first", grace_period_seconds=0)
    # retried when its 1 s backoff ends, well before the backoff's 10 s cap
    bound = await wait_for_pod(store, "default", "second", lambda p: p["spec"].get("nodeName") == "n", timeout=5)
    assert bound["status"]["conditions"][0]["status"] == "True"


async def test_new_node_makes_pending_pod_schedulable(cluster_store):
    store = cluster_store
    store.create("pods", pod("waits", gpus=2), "default")
    await wait_for_pod(store, "default", "waits", lambda p: p["status"].get("conditions"), timeout=10)
    assert store.get("pods", "default", "waits")["status"]["conditions"][0]["message"] == "no nodes available to schedule pods"
    store.create("nodes", node("big", 4))
    # tried again when its 1 s backoff ends, well before the backoff's 10 s cap
    await wait_for_pod(store, "default", "waits", lambda p: p["spec"].get("nodeName") == "big", timeout=5)


async def test_scheduler_objects_validate(cluster_store):
    store = cluster_store
    store.create("nodes", node("n", 1))
    store.create("pods", pod("a", gpus=1), "default")
    store.create("pods", pod("b", gpus=1), "default")
    await wait_for_pod(store, "default", "b", lambda p: p["status"].get("conditions"), timeout=10)
    await wait_until(lambda: len(store.list("events")[0]) >= 2, 5, "an event for each pod")
    events, _ = store.list("events")
    assert {e["reason"] for e in events} == {"Scheduled", "FailedScheduling"}
    for obj in [*events, *store.list("nodes")[0]]:
        kubernetes_validate.validate(obj, "1.31", strict=True)
