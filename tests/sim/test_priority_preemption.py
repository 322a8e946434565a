"""PriorityClasses, the Priority admission plugin and kube-scheduler's preemption, through the real client."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import kubernetes
import kubernetes_validate
import pytest
from kubernetes.client.rest import ApiException

from jupyter_gpuburst.sim.testing import one_node_cluster, wait_for_pod, wait_until

SLEEP = ["sleep", "1000"]
KUBECTL = "/usr/bin/kubectl"


def client(url: str) -> kubernetes.client.ApiClient:
    config = kubernetes.client.Configuration()
    config.host = url
    return kubernetes.client.ApiClient(config)


def priority_class(name: str, value: int, **extra) -> dict:
    return {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": name}, "value": value, **extra}


def gpu_pod(name: str, gpus: int = 1, grace: int = 1, **spec) -> dict:
    limits = {"nvidia.com/gpu": str(gpus)}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": grace,
            "containers": [{"name": "c", "image": "busybox:1.36", "command": SLEEP, "resources": {"limits": limits}}],
            **spec,
        },
    }


def body(exc: ApiException) -> dict:
    return json.loads(exc.body)


@pytest.fixture
async def cluster(tmp_path):
    async with one_node_cluster(tmp_path, 41, {"nvidia.com/gpu": 2}) as c:
        yield c


async def test_priority_classes_and_admission(cluster):
    def run():
        with client(cluster.url) as api:
            sched = kubernetes.client.SchedulingV1Api(api)
            core = kubernetes.client.CoreV1Api(api)
            names = {pc.metadata.name: pc.value for pc in sched.list_priority_class().items}
            assert names == {"system-cluster-critical": 2000000000, "system-node-critical": 2000001000}
            made = sched.create_priority_class(priority_class("user", 1000, description="students"))
            assert made.preemption_policy == "PreemptLowerPriority" and made.value == 1000
            sched.create_priority_class(priority_class("everyone", 5, globalDefault=True))
            with pytest.raises(ApiException) as err:
                sched.create_priority_class(priority_class("another-default", 6, globalDefault=True))
            assert err.value.status == 403
            assert "PriorityClass everyone is already marked as default. Only one default can exist" in body(err.value)["message"]
            with pytest.raises(ApiException) as err:
                sched.create_priority_class(priority_class("system-mine", 10))
            assert err.value.status == 422 and body(err.value)["details"]["causes"][0]["field"] == "metadata.name"
            with pytest.raises(ApiException) as err:
                sched.create_priority_class(priority_class("too-high", 1_000_000_001))
            assert (
                err.value.status == 422 and "maximum allowed value of a user defined priority is 1000000000" in body(err.value)["message"]
            )
            with pytest.raises(ApiException) as err:
                sched.patch_priority_class("user", {"value": 7})
            assert err.value.status == 422 and body(err.value)["details"]["causes"][0]["field"] == "value"

            pod = core.create_namespaced_pod("default", gpu_pod("high", priorityClassName="user"))
            assert pod.spec.priority == 1000 and pod.spec.preemption_policy == "PreemptLowerPriority"
            pod = core.create_namespaced_pod("default", gpu_pod("plain"))
            assert pod.spec.priority_class_name == "everyone" and pod.spec.priority == 5
            with pytest.raises(ApiException) as err:
                core.create_namespaced_pod("default", gpu_pod("lost", priorityClassName="nope"))
            assert err.value.status == 403 and body(err.value)["reason"] == "Forbidden"
            assert body(err.value)["message"] == 'pods "lost" is forbidden: no PriorityClass with name nope was found'
            with pytest.raises(ApiException) as err:
                core.create_namespaced_pod("default", gpu_pod("cheat", priorityClassName="user", priority=99))
            assert err.value.status == 403 and "must not be provided in pod spec" in body(err.value)["message"]
            assert not [p for p in core.list_namespaced_pod("default").items if p.metadata.name in ("lost", "cheat")]
            for pc in sched.list_priority_class().items:
                kubernetes_validate.validate(
                    api.sanitize_for_serialization(pc) | {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass"},
                    "1.31",
                    strict=True,
                )

    await asyncio.to_thread(run)


async def test_preemption_evicts_the_fewest_lowest_victims_and_binds_the_preemptor(cluster):
    store = cluster.store
    store.create("priorityclasses.scheduling.k8s.io", priority_class("pool", -10, description="warm pool"))
    store.create("priorityclasses.scheduling.k8s.io", priority_class("pool-high", -5))
    store.create("priorityclasses.scheduling.k8s.io", priority_class("student", 1000))
    store.create("pods", gpu_pod("low", priorityClassName="pool"), "default")
    store.create("pods", gpu_pod("lowish", priorityClassName="pool-high"), "default")
    for n in ("low", "lowish"):
        await wait_for_pod(store, "default", n, lambda p: p["status"].get("phase") == "Running")

    def run():
        with client(cluster.url) as api:
            core = kubernetes.client.CoreV1Api(api)
            core.create_namespaced_pod("default", gpu_pod("student", priorityClassName="student"))

    await asyncio.to_thread(run)
    # the lowest-priority pod is the one victim; the preemptor is nominated while it terminates
    nominated = await wait_for_pod(store, "default", "student", lambda p: p["status"].get("nominatedNodeName") == "n", timeout=5)
    assert not nominated["spec"].get("nodeName")
    victim = store.get("pods", "default", "low")
    assert victim["metadata"].get("deletionTimestamp") and victim["metadata"]["deletionGracePeriodSeconds"] == 1
    cond = next(c for c in victim["status"]["conditions"] if c["type"] == "DisruptionTarget")
    assert cond["status"] == "True" and cond["reason"] == "PreemptionByScheduler"
    assert cond["message"] == "default-scheduler: preempting to accommodate a higher priority pod"
    kubernetes_validate.validate(victim, "1.31", strict=True)
    events, _ = store.list("events", "default", field_selector="involvedObject.name=low,reason=Preempted")
    assert events and events[0]["message"] == f"Preempted by pod {nominated['metadata']['uid']} on node n"
    bound = await wait_for_pod(store, "default", "student", lambda p: p["spec"].get("nodeName") == "n", timeout=10)
    assert "nominatedNodeName" not in bound["status"]  # kube-apiserver 1.35 clears it on binding
    assert not store.exists("pods", "default", "low")
    assert store.get("pods", "default", "lowish")["status"]["phase"] == "Running"
    assert "DisruptionTarget" not in {c["type"] for c in store.get("pods", "default", "lowish")["status"]["conditions"]}


async def test_never_policy_and_equal_priority_do_not_preempt(cluster):
    store = cluster.store
    store.create("priorityclasses.scheduling.k8s.io", priority_class("pool", -10))
    store.create("priorityclasses.scheduling.k8s.io", priority_class("polite", 1000, preemptionPolicy="Never"))
    store.create("pods", gpu_pod("low", gpus=2, priorityClassName="pool"), "default")
    await wait_for_pod(store, "default", "low", lambda p: p["status"].get("phase") == "Running")
    store.create("pods", gpu_pod("polite", priorityClassName="polite"), "default")
    store.create("pods", gpu_pod("peer", priorityClassName="pool"), "default")

    def failed(name):
        events, _ = store.list("events", "default", field_selector=f"involvedObject.name={name},reason=FailedScheduling")
        return events and events[-1]["message"]

    message = await wait_until(lambda: failed("polite"), what="polite pod FailedScheduling")
    assert message == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu. preemption: not eligible due to preemptionPolicy=Never."
    message = await wait_until(lambda: failed("peer"), what="peer pod FailedScheduling")
    assert message.endswith("preemption: 0/1 nodes are available: 1 No preemption victims found for incoming pod.")
    low = store.get("pods", "default", "low")
    assert not low["metadata"].get("deletionTimestamp") and low["status"]["phase"] == "Running"
    assert not store.get("pods", "default", "polite")["status"].get("nominatedNodeName")


async def test_a_preemptor_is_refused_with_its_nomination_and_bound_once_its_victims_are_gone(cluster):
    """What a reader of the preemptor sees, in kube-scheduler 1.35's order: one update with
    nominatedNodeName and PodScheduled=False, the FailedScheduling event, then (the victim gone
    at once, grace period 0) the binding without waiting out a backoff, the nomination cleared,
    and the Scheduled event after the FailedScheduling one."""
    store = cluster.store
    cluster.scheduler.backoff_initial_s = cluster.scheduler.backoff_max_s = 60  # a backoff would outlast the test
    store.create("priorityclasses.scheduling.k8s.io", priority_class("pool", -10, preemptionPolicy="Never"))
    store.create("pods", gpu_pod("placeholder", gpus=2, grace=0, priorityClassName="pool"), "default")
    await wait_for_pod(store, "default", "placeholder", lambda p: p["status"].get("phase") == "Running")
    _, version = store.list("pods", "default")
    pods = store.watch("pods", "default", resource_version=version)
    _, version = store.list("events", "default")
    events = store.watch("events", "default", resource_version=version)
    store.create("pods", gpu_pod("student"), "default")
    seen = []
    async with asyncio.timeout(15):
        async for _etype, pod in pods:
            if pod["metadata"]["name"] != "student":
                continue
            if pod["status"].get("nominatedNodeName") or pod["spec"].get("nodeName"):
                seen.append(pod)
            if pod["spec"].get("nodeName"):
                break
    pods.close()
    nominated, bound = seen[0], seen[-1]
    (scheduled,) = [c for c in nominated["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert nominated["status"]["nominatedNodeName"] == "n" and not nominated["spec"].get("nodeName")
    assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
    assert scheduled["message"] == "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."
    assert bound["spec"]["nodeName"] == "n" and "nominatedNodeName" not in bound["status"]
    reasons = []
    async with asyncio.timeout(5):
        async for _etype, event in events:
            if event["involvedObject"]["name"] == "student":
                reasons.append(event["reason"])
            if "Scheduled" in reasons:
                break
    events.close()
    assert reasons == ["FailedScheduling", "Scheduled"]


async def test_freed_room_is_held_for_the_nominated_pod(cluster):
    """While victims terminate, a lower-priority pod that arrives does not take the room."""
    store = cluster.store
    store.create("priorityclasses.scheduling.k8s.io", priority_class("pool", -10))
    store.create("priorityclasses.scheduling.k8s.io", priority_class("student", 1000))
    store.create("pods", gpu_pod("low", gpus=2, grace=3, priorityClassName="pool"), "default")
    await wait_for_pod(store, "default", "low", lambda p: p["status"].get("phase") == "Running")
    store.create("pods", gpu_pod("student", gpus=2, priorityClassName="student"), "default")
    await wait_for_pod(store, "default", "student", lambda p: p["status"].get("nominatedNodeName") == "n", timeout=5)
    store.create("pods", gpu_pod("late", gpus=1), "default")
    bound = await wait_for_pod(store, "default", "student", lambda p: p["spec"].get("nodeName") == "n", timeout=15)
    assert bound["spec"]["nodeName"] == "n"
    assert not store.get("pods", "default", "late")["spec"].get("nodeName")


@pytest.mark.skipif(not os.access(KUBECTL, os.X_OK), reason=f"{KUBECTL} is not installed on this machine")
async def test_kubectl_applies_and_lists_priority_classes(apiserver, apiserver_kubeconfig, tmp_path):
    env = {**os.environ, "KUBECONFIG": str(apiserver_kubeconfig), "KUBECACHEDIR": str(tmp_path / "cache"), "HOME": str(tmp_path)}

    async def kubectl(*args: str) -> str:
        proc = await asyncio.create_subprocess_exec(KUBECTL, *args, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 30)
        assert proc.returncode == 0, err.decode()
        return out.decode()

    manifest = Path(__file__).resolve().parents[2] / "hub_config" / "warm-pools.yaml"
    assert "priorityclass.scheduling.k8s.io/gpuburst-warm-pool created" in await kubectl("apply", "-f", str(manifest))
    rows = [line.split() for line in (await kubectl("get", "pc")).strip().splitlines()]
    assert rows[0] == ["NAME", "VALUE", "GLOBAL-DEFAULT", "AGE", "PREEMPTIONPOLICY"]
    mine = next(r for r in rows if r[0] == "gpuburst-warm-pool")
    assert mine[1:3] == ["-10", "false"] and mine[4] == "Never"
    assert any(r[:3] == ["system-node-critical", "2000001000", "false"] for r in rows)


def admitted(name: str, priority: int, node: str | None = None, nominated: str | None = None) -> dict:
    """A 1-GPU pod as the API server stores it (requests defaulted from limits), bound or nominated."""
    pod = gpu_pod(name)
    container = pod["spec"]["containers"][0]
    container["resources"]["requests"] = dict(container["resources"]["limits"])
    pod["metadata"].update(namespace="default", uid=f"uid-{name}")
    pod["spec"]["priority"] = priority
    pod["status"] = {"phase": "Pending"}
    if node:
        pod["spec"]["nodeName"] = node
        pod["status"] = {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}
    if nominated:
        pod["status"]["nominatedNodeName"] = nominated
    return pod


def test_a_second_preemptor_does_not_count_on_the_room_the_first_one_freed():
    """kube-scheduler's dry run leaves room for pods already nominated to the node
    (RunFilterPluginsWithNominatedPods) and takes no node where nobody would be evicted."""
    from jupyter_gpuburst.sim.cluster import node_object
    from jupyter_gpuburst.sim.config import NodeConfig
    from jupyter_gpuburst.sim.fit import usage_by_node
    from jupyter_gpuburst.sim.preemption import nominated_usage, select_candidate

    node = node_object("n", NodeConfig(name="n", resources={"nvidia.com/gpu": 2}), "127.10.0.9", "2026-01-01T00:00:00Z")
    # two placeholders held both GPUs; the first student's preemption has removed one of them
    left = admitted("pool-b", -10, node="n")
    first, second = admitted("first", 0, nominated="n"), admitted("second", 0)
    pods = [left, first, second]
    failed = {"n": ["Insufficient nvidia.com/gpu"]}
    held = nominated_usage(second, [first, second])
    assert held == {"n": {"nvidia.com/gpu": 1, "pods": 1}}
    candidate = select_candidate(second, [node], pods, usage_by_node(pods), failed, held)
    assert candidate is not None and [v["metadata"]["name"] for v in candidate.victims] == ["pool-b"]
    # without the first student's nomination the free GPU is the second's: nothing to evict, no candidate
    assert select_candidate(second, [node], pods, usage_by_node(pods), failed) is None


async def test_a_burst_of_students_each_evicts_a_placeholder_of_its_own(cluster):
    """Students pressing Start together on a node full of warm-pool placeholders (grace period 0,
    as the pools make them): every one is placed after one preemption of a placeholder of its own."""
    store = cluster.store
    store.create("priorityclasses.scheduling.k8s.io", priority_class("pool", -10, preemptionPolicy="Never"))
    for i in range(2):
        store.create("pods", gpu_pod(f"pool-{i}", grace=0, priorityClassName="pool"), "default")
    for i in range(2):
        await wait_for_pod(store, "default", f"pool-{i}", lambda p: p["status"].get("phase") == "Running")
    for i in range(2):  # at once: one scheduling pass sees both
        store.create("pods", gpu_pod(f"student-{i}", grace=0), "default")
    for i in range(2):
        await wait_for_pod(store, "default", f"student-{i}", lambda p: p["spec"].get("nodeName") == "n", timeout=15)
    preempted, _ = store.list("events", "default", field_selector="reason=Preempted")
    assert sorted(e["involvedObject"]["name"] for e in preempted) == ["pool-0", "pool-1"]
    for i in range(2):
        # one try, one preemption, then bound: never nominated for room another student freed
        failed, _ = store.list("events", "default", field_selector=f"involvedObject.name=student-{i},reason=FailedScheduling")
        assert len(failed) == 1, [e["message"] for e in failed]
