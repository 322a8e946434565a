"""On the local federation, a GPU kernel the hub starts (a pod of its own, or a pre-started one it
adopts) has its own NetworkPolicy, admitting its server only, and the policy goes with the pod;
a kernel whose policy is refused is no one's and leaves nothing behind; a donor kernel has none."""

from __future__ import annotations

import pytest
from helpers.kernels import registry_on_federation
from kubernetes_asyncio.client import ApiException

from jupyter_gpuburst.core import keys, liqo
from jupyter_gpuburst.hub.kernels import ingress, prestarted
from jupyter_gpuburst.hub.kernels.podstate import ready
from jupyter_gpuburst.hub.kernels.records import KernelError
from jupyter_gpuburst.hub.settings import GPUBurstSettings
from jupyter_gpuburst.sim.peering import NSOFF
from jupyter_gpuburst.sim.testing import gone, wait_until

pytestmark = pytest.mark.integration

NETPOL = "networkpolicies.networking.k8s.io"
KEY = "f" * 32


async def start(registry, user: str = "alice", server_name: str = "lab"):
    record = await registry.start(
        user=user,
        groups=frozenset(),
        server_name=server_name,
        server_pod=None,
        profile_slug="gpu-1",
        key=KEY,
        signature_scheme="hmac-sha256",
        kernel_id="k1",
        notebook_dir="",
    )
    await registry.wait(record, 60)
    assert record.state == "running", record.error
    return record


def policies(registry, namespace: str = "default") -> dict[str, dict]:
    return {p["metadata"]["name"]: p for p in registry.federation.origin.store.list(NETPOL, namespace)[0]}


def assert_admits_its_server_only(registry, record) -> None:
    store = registry.federation.origin.store
    pod = store.get("pods", record.namespace, record.pod_name)
    policy = policies(registry, record.namespace)[record.pod_name]
    # it selects this kernel's pod (by the kernel's id, on the pod as a label)
    assert policy["spec"]["podSelector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert policy["spec"]["podSelector"]["matchLabels"][keys.KERNEL_LABEL] == record.id
    [rule] = policy["spec"]["ingress"]
    assert [peer["podSelector"]["matchLabels"] for peer in rule["from"]] == [ingress.server_labels(record.user, record.server_name)]
    assert sorted(p["port"] for p in rule["ports"]) == sorted(record.ports.values())
    [owner] = policy["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["uid"]) == ("Pod", record.pod_name, pod["metadata"]["uid"])


async def test_a_kernel_started_cold_admits_its_server_and_its_policy_goes_with_its_pod(tmp_path):
    async with registry_on_federation(tmp_path) as reg:
        store = reg.federation.origin.store
        record = await start(reg)
        assert record.prestarted is False
        assert_admits_its_server_only(reg, record)
        await reg.stop(record)
        await wait_until(lambda: gone(store, NETPOL, "default", record.pod_name), timeout=30, what="the policy goes with its pod")


async def test_an_adopted_kernel_admits_its_adopter_only_and_its_policy_goes_with_its_pod(tmp_path):
    async with registry_on_federation(tmp_path) as reg:
        store = reg.federation.origin.store
        reg.prestarted = {("origin", "gpu-1")}
        body = prestarted.pooled_pod("origin", reg.profiles["gpu-1"], reg.settings, "img", "default", "system-node-critical", [])
        body["spec"].pop("priorityClassName")  # no warm pool's class in this federation: the pod alone is under test
        name = store.create("pods", body, "default")["metadata"]["name"]
        await wait_until(lambda: ready(store.get("pods", "default", name)), timeout=60, what="the kernel waits")
        pool = prestarted.pool_name("origin", "gpu-1")
        await wait_until(lambda: any(p["metadata"]["name"] == name for p in reg.tracker.pool_pods(pool)), timeout=30, what="seen waiting")
        # waiting, it has no policy of its own: nothing reaches it
        assert policies(reg) == {}

        record = await start(reg, user="bob", server_name="")
        assert record.prestarted is True and record.pod_name == name
        assert_admits_its_server_only(reg, record)
        # whoever deletes the pod, the garbage collector takes its policy with it
        store.delete("pods", "default", name, grace_period_seconds=0)
        await wait_until(lambda: gone(store, NETPOL, "default", name), timeout=30, what="the policy goes with its pod")


async def test_a_kernel_whose_policy_is_refused_fails_and_leaves_nothing(tmp_path, monkeypatch):
    async with registry_on_federation(tmp_path) as reg:
        store = reg.federation.origin.store

        async def refused(namespace, body):
            raise ApiException(status=403, reason="Forbidden")

        monkeypatch.setattr(reg.networking, "create_namespaced_network_policy", refused)
        with pytest.raises(KernelError, match="could not start the GPU kernel"):
            await start(reg)
        assert reg.records == {}
        assert [
            p["metadata"]["name"] for p in store.list("pods", "default")[0] if keys.KERNEL_ANNOTATION in p["metadata"]["annotations"]
        ] == []
        assert [s["metadata"]["name"] for s in store.list("secrets", "default")[0]] == []


async def test_a_donor_kernel_gets_no_policy_on_the_origin(tmp_path):
    # Liqo reflects no NetworkPolicy, and the origin's pod is only the donor's pod's shadow
    async with registry_on_federation(tmp_path) as reg:
        reg.federation.origin.store.create(NSOFF, liqo.namespace_offloading("default"), "default")
        reg.tracker.placer.policy = GPUBurstSettings(strategy="donor-only").policy()
        record = await start(reg)
        assert record.placement.site == "donor-1" and record.namespace == "default-kernels-donor-1"
        assert policies(reg, record.namespace) == {} and policies(reg) == {}
