"""Pre-started GPU kernels on a donor wait in that donor's kernel namespace, offloaded to it
alone, where a request placed on that donor adopts one (its key's Secret there reaches no other
donor); in the servers' namespace, offloaded to every donor, none is ever adopted
(tests/hub/kernels/test_prestarted_registry.py)."""

from __future__ import annotations

import secrets

import pytest
from helpers.kernels import registry_on_federation
from traitlets.config import Config

from jupyter_gpuburst.core import keys
from jupyter_gpuburst.hub.kernels import prestarted
from jupyter_gpuburst.hub.kernels.podstate import ready
from jupyter_gpuburst.hub.pools import live
from jupyter_gpuburst.hub.pools.controller import PoolController
from jupyter_gpuburst.hub.pools.settings import WarmPools
from jupyter_gpuburst.hub.settings import GPUBurstSettings
from jupyter_gpuburst.hub.sites.offloading import NamespaceOffloader
from jupyter_gpuburst.sim.testing import wait_until

pytestmark = pytest.mark.integration

DONOR_KERNELS = "default-kernels-donor-1"
POOL = prestarted.pool_name("donor-1", "gpu-1")


def waiting(store, namespace: str) -> list[dict]:
    pods, _ = store.list("pods", namespace, label_selector=f"{keys.POOL_LABEL}={POOL}")
    return [p for p in pods if not p["metadata"].get("deletionTimestamp") and ready(p)]


async def test_a_donor_kernel_pool_waits_in_the_donors_kernel_namespace_and_a_request_there_adopts_it(tmp_path):
    from kubernetes_asyncio.client import CustomObjectsApi, SchedulingV1Api

    from jupyter_gpuburst.bench.kernels import first_reply

    async with registry_on_federation(tmp_path) as reg:
        store = reg.federation.origin.store
        reg.tracker.placer.policy = GPUBurstSettings(strategy="donor-only").policy()
        reg.prestarted = {("donor-1", "gpu-1")}
        c = Config()
        c.GPUKernelSettings.profiles = [{"slug": "gpu-1", "resource": "nvidia.com/gpu", "count": 1}]
        c.GPUKernelSettings.image = "img"
        c.WarmPools.kernels = [{"site": "donor-1", "profile": "gpu-1", "count": 1}]
        settings = WarmPools(config=c)
        assert prestarted.pool_namespace("default", "donor-1") == DONOR_KERNELS
        api_client = reg.api.api_client
        pools = PoolController(
            settings,
            {},
            "default",
            reg.api,
            SchedulingV1Api(api_client),
            reg.tracker,
            reg.log,
            offloader=NamespaceOffloader(CustomObjectsApi(api_client), reg.log),
            kernel_pods=live.kernel_pod_builders(c, settings, "default"),
        )
        await pools.reconcile()
        # the pool made the donor's kernel namespace, offloaded to that donor alone, and waits there
        [offloading] = store.list("namespaceoffloadings.offloading.liqo.io", DONOR_KERNELS)[0]
        assert "donor-1" in str(offloading["spec"].get("clusterSelector"))
        await wait_until(lambda: waiting(store, DONOR_KERNELS), timeout=90, what="the donor's kernel waits in its namespace")
        assert not waiting(store, "default")
        [name] = [p["metadata"]["name"] for p in waiting(store, DONOR_KERNELS)]
        await wait_until(
            lambda: any(p["metadata"]["name"] == name and ready(p) for p in reg.tracker.pool_pods(POOL)),
            timeout=30,
            what="the hub's watch sees it waiting",
        )

        key = secrets.token_hex(16)
        record = await reg.start(
            user="alice",
            groups=frozenset(),
            server_name="",
            server_pod=None,
            profile_slug="gpu-1",
            key=key,
            signature_scheme="hmac-sha256",
            kernel_id="k1",
            notebook_dir="",
        )
        await reg.wait(record, 60)
        assert record.state == "running", record.error
        assert (record.prestarted, record.pod_name, record.namespace) == (True, name, DONOR_KERNELS)
        # it answers with the adopter's key, which is in that namespace only
        connection = {"transport": "tcp", "ip": reg.pod_ip(record), **record.ports}
        await first_reply(connection, key.encode(), timeout=30)
        assert name not in {s["metadata"]["name"] for s in store.list("secrets", "default")[0]}
        # updated again seconds later, so that the donor's kubelet syncs it once more: Liqo may
        # bring the donor the adoption's update before the Secret (prestarted.VOLUME_SYNC_AFTER_S)
        last = str(len(prestarted.VOLUME_SYNC_AFTER_S))
        synced = lambda: (store.get("pods", DONOR_KERNELS, name)["metadata"].get("annotations") or {}).get(keys.VOLUME_SYNC_ANNOTATION)  # noqa: E731
        await wait_until(lambda: synced() == last, timeout=30, what="the adopted pod updated again")

        # adopted, it is no pool's: the next pass makes another one there
        await pools.reconcile()
        await wait_until(
            lambda: [p for p in waiting(store, DONOR_KERNELS) if p["metadata"]["name"] != name],
            timeout=90,
            what="the pool refills in the donor's kernel namespace",
        )


async def test_a_donor_kernel_namespace_the_hub_may_not_read_keeps_no_other_pool_from_its_pass(caplog):
    import json
    from types import SimpleNamespace

    from kubernetes_asyncio.client import ApiException

    from jupyter_gpuburst.core.inventory import Inventory
    from jupyter_gpuburst.hub.kernels.settings import GPUKernelSettings, KernelProfile
    from jupyter_gpuburst.sim.cluster import node_object
    from jupyter_gpuburst.sim.config import NodeConfig

    class Api:
        """The pools' calls, on a dict, in a federation whose donor kernel namespace the hub may not read."""

        def __init__(self):
            self.pods: dict[tuple[str, str], dict] = {}

        async def list_namespaced_pod(self, namespace, label_selector, _preload_content):
            if namespace == prestarted.pool_namespace("jhub", "donor-1"):
                raise ApiException(status=403, reason="Forbidden")
            body = json.dumps({"items": [p for (ns, _), p in self.pods.items() if ns == namespace]}).encode()

            async def read():
                return body

            return SimpleNamespace(read=read)

        async def create_namespaced_pod(self, namespace, body):
            assert body["metadata"]["namespace"] == namespace
            pod = json.loads(json.dumps(body))
            pod["metadata"].update(uid=f"u{len(self.pods)}", creationTimestamp="2026-01-01T00:00:00Z")
            self.pods[(namespace, pod["metadata"]["name"])] = pod

        async def create_priority_class(self, body):
            pass

    inv = Inventory(pool_namespace=lambda namespace: namespace == "jhub")
    node = NodeConfig(name="g", cpu="16", memory="64Gi", resources={"nvidia.com/gpu": 2})
    inv.apply_node_event("ADDED", node_object("g", node, "127.0.0.9", "t"))
    profile = KernelProfile(slug="gpu-1", display_name="1 GPU", resource="nvidia.com/gpu", count=1)

    def builder(site):
        return lambda: prestarted.pooled_pod(
            site, profile, GPUKernelSettings(), "img", prestarted.pool_namespace("jhub", site), "gpuburst-warm-pool", []
        )

    settings = WarmPools(kernels=[{"site": "origin", "profile": "gpu-1", "count": 2}, {"site": "donor-1", "profile": "gpu-1", "count": 1}])
    kernel_pods = {prestarted.pool_name(site, "gpu-1"): builder(site) for site in ("origin", "donor-1")}
    api = Api()
    tracker = SimpleNamespace(inventory=inv, snapshot=inv.snapshot)
    pools = PoolController(settings, {}, "jhub", api, api, tracker, kernel_pods=kernel_pods)
    await pools.reconcile()
    assert [ns for ns, _ in api.pods] == ["jhub", "jhub"]
    assert f"cannot list the pods of {prestarted.pool_namespace('jhub', 'donor-1')}: 403" in caplog.text
