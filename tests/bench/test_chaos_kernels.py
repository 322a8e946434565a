"""The chaos benchmark's kernel counts can fail: an orphaned start, a duplicate, a donor twin
without its pod, and a kernel that no longer runs where it ran are each found."""

from __future__ import annotations

from types import SimpleNamespace

from jupyter_gpuburst.bench import chaos_kernels
from jupyter_gpuburst.bench.chaos import is_clear
from jupyter_gpuburst.core import keys
from jupyter_gpuburst.sim.store import Store

DONOR_NS = chaos_kernels.donor_namespace("donor-1")
REMOTE_NS = f"{DONOR_NS}-origin"


def kernel(name: str, record: str, namespace: str = DONOR_NS, **labels: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {keys.COMPONENT_LABEL: keys.KERNEL_COMPONENT, keys.KERNEL_LABEL: record, **labels},
        },
        "spec": {"nodeName": "liqo-donor-1", "containers": [{"name": "kernel", "image": "k"}]},
        "status": {"phase": "Running"},
    }


def federation(origin_pods: list[dict], donor_pods: list[dict]) -> SimpleNamespace:
    origin, donor = Store(), Store()
    for store, pods in ((origin, origin_pods), (donor, donor_pods)):
        for namespace in {p["metadata"]["namespace"] for p in pods}:
            store.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    for store, pods in ((origin, origin_pods), (donor, donor_pods)):
        for pod in pods:
            made = store.create("pods", pod)  # made Pending, as an API server makes it
            store.replace("pods", {**made, "status": {**made["status"], "phase": "Running"}}, subresource="status")
    peering = SimpleNamespace(remote_namespace=lambda namespace: f"{namespace}-origin")
    return SimpleNamespace(
        origin=SimpleNamespace(store=origin), donors={"donor-1": SimpleNamespace(store=donor)}, peerings={"donor-1": peering}
    )


def ran(user: str, record: str) -> chaos_kernels.KernelStart:
    return chaos_kernels.KernelStart(user, outcome="ran", record=record, site="donor-1")


async def test_an_orphaned_start_a_duplicate_and_a_twin_without_its_pod_are_counted(monkeypatch):
    fed = federation(
        [
            kernel("k-ann", "r-ann"),
            kernel("k-ann-lost", "r-lost"),  # a start the hub made that ann never heard of
            kernel("k-eve", "r-eve"),
            kernel("k-eve-2", "r-eve"),  # two pods of one kernel
            kernel("k-pool", "", **{keys.POOL_LABEL: "donor-1.gpu-1"}),  # a pre-started kernel waiting: no student's
        ],
        [
            kernel("k-ann", "r-ann", REMOTE_NS),
            kernel("k-ann", "r-ann", f"{DONOR_NS}-other"),  # a twin of nothing on the origin
            kernel("k-eve", "r-eve", REMOTE_NS),
        ],
    )
    pods, extra_twins, donor_orphans = chaos_kernels.kernel_pods(fed)
    assert sorted(p["metadata"]["name"] for p in pods) == ["k-ann", "k-ann-lost", "k-eve", "k-eve-2"]
    assert extra_twins == 0 and donor_orphans == 1
    # the donor's loss waits for the students' working kernels, not for any kernel pod there
    assert chaos_kernels.running_on(fed, "liqo-donor-1", {"r-ann", "r-eve"}) == 3
    assert chaos_kernels.running_on(fed, "liqo-donor-1", {"r-lost-elsewhere"}) == 0
    assert chaos_kernels.running_on(fed, "another-node", {"r-ann"}) == 0
    assert chaos_kernels.working([ran("ann", "r-ann"), chaos_kernels.KernelStart("bob", outcome="lost", record="r-x")]) == {"r-ann"}

    async def runs(*args, **kwargs) -> str:
        return ""

    starts = [ran("ann", "r-ann"), ran("eve", "r-eve"), chaos_kernels.KernelStart("bob", outcome="refused", message="")]
    monkeypatch.setattr(chaos_kernels, "still_runs", runs)
    counts = await chaos_kernels.count(None, None, fed, starts, {"ann": "t", "eve": "t", "bob": "t"}, is_clear)
    # bob was told no reason: lost, not refused
    assert (counts["ran"], counts["refused"], counts["lost"]) == (2, 0, 1), counts
    assert counts["orphaned"] == 2 and counts["duplicated"] == 1, counts  # k-ann-lost and the donor's stray twin; k-eve-2


async def test_a_kernel_that_no_longer_answers_or_runs_in_another_pod_is_lost():
    fed = federation([kernel("k-ann", "r-ann")], [])
    uid = fed.origin.store.list("pods")[0][0]["metadata"]["uid"]
    start = ran("ann", "r-ann")
    start.pod_uid = "another-uid"
    hub = SimpleNamespace(process=SimpleNamespace(url="http://hub"))

    class Session:
        def request(self, method, url, **kwargs):
            return Answer()

    class Answer:
        status, content_type = 200, "application/json"

        async def __aenter__(self):
            return self

        async def __aexit__(self, *exc):
            return False

        async def json(self, content_type=None):
            return {"state": "running", "connection": {}}

    why = await chaos_kernels.still_runs(hub, Session(), fed, start, "token")
    assert why == "its pod is gone or was replaced"
    start.pod_uid = uid
    fed.origin.store.delete("pods", DONOR_NS, "k-ann", grace_period_seconds=0)
    assert await chaos_kernels.still_runs(hub, Session(), fed, start, "token") == "its pod is gone or was replaced"
