"""Warm pools on a real hub against the local federation: placeholders fill the origin and a
donor, pull the image, count as free, and give way to a spawn at once."""

from __future__ import annotations

import dataclasses

import aiohttp
import kubernetes_validate
import pytest
from helpers.federation import DONOR, occupy, pod_of

from jupyter_gpuburst.core import keys
from jupyter_gpuburst.hub.pools.manifests import priority_class
from jupyter_gpuburst.sim.testing import wait_until

pytestmark = pytest.mark.integration
PC = "priorityclasses.scheduling.k8s.io"
POOLS = """
from jupyter_gpuburst.hub import install
c.WarmPools.pools = [{"site": "origin", "profile": "gpu1", "count": 1}, {"site": "donor-1", "profile": "gpu1", "count": 2}]
c.WarmPools.interval_seconds = 0.5
install(c)
"""


def placeholders(federation, site: str | None = None, bound: bool = True) -> list[dict]:
    pods, _ = federation.origin.store.list("pods", "default", label_selector=keys.POOL_LABEL)
    return [
        p
        for p in pods
        if not p["metadata"].get("deletionTimestamp")
        and (site is None or p["metadata"]["labels"][keys.POOL_SITE_LABEL] == site)
        and (not bound or p["status"].get("phase") == "Running")
    ]


async def capacity(hub) -> dict:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{hub.url}/services/gpuburst/api/capacity", headers={"Authorization": f"token {hub.token}"}) as resp:
            assert resp.status == 200
            return await resp.json(content_type=None)


async def test_pools_fill_count_as_free_and_give_way_to_spawns(federation, start_hub):
    # the admin's step on each donor: Liqo keeps the class name on the offloaded placeholder
    federation.donors[DONOR].store.create(PC, priority_class("gpuburst-warm-pool", -10))
    for cluster in (federation.origin, federation.donors[DONOR]):  # nodes that never ran an image
        images = cluster.kubelet.images
        images.settings = dataclasses.replace(images.settings, preloaded=())
    hub = await start_hub(POOLS)
    await wait_until(lambda: len(placeholders(federation, "origin")) == 1, timeout=30, what="origin pool ready")
    await wait_until(lambda: len(placeholders(federation, DONOR)) == 2, timeout=30, what="donor pool ready")
    pc = federation.origin.store.get(PC, None, "gpuburst-warm-pool")
    assert pc["value"] == -10 and pc["preemptionPolicy"] == "Never"
    placeholder = placeholders(federation, "origin")[0]
    assert placeholder["spec"]["priority"] == -10 and placeholder["spec"]["nodeName"] == "origin-gpu"
    kubernetes_validate.validate(placeholder, "1.31", strict=True)
    # the restricted Pod Security Standard, as our other pods
    assert placeholder["spec"]["securityContext"]["runAsNonRoot"] is True
    container = placeholder["spec"]["containers"][0]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False and container["securityContext"]["capabilities"] == {
        "drop": ["ALL"]
    }
    assert placeholder["spec"]["automountServiceAccountToken"] is False
    image = container["image"]
    node = federation.origin.store.get("nodes", None, "origin-gpu")
    assert image in {n for i in node["status"].get("images") or [] for n in i["names"]}  # pulled on the node
    # placement counts the placeholders' GPUs as free; the page shows the pools apart
    report = await wait_until(lambda: _ready_pools(capacity(hub)), timeout=10, what="pools on the capacity report")
    sites = {s["site"]: s for s in report["sites"]}
    assert sites["origin"]["resources"]["nvidia.com/gpu"]["free"] == 2
    pools = {(p["site"], p["profile"]): p for p in report["pools"]}
    assert pools[("origin", "gpu1")]["ready"] == 1 and pools[("origin", "gpu1")]["gpus"] == {"nvidia.com/gpu": 1}
    assert pools[(DONOR, "gpu1")]["target"] == 2

    # two students take both origin GPUs: the second takes the placeholder's at once
    for user in ("alice", "bob"):
        status, body = await hub.spawn(user, {"profile": "gpu1-local"})
        assert status in (201, 202), body
    for user in ("alice", "bob"):
        await hub.wait_ready(user)
        assert pod_of(federation, user)["spec"]["nodeName"] == "origin-gpu"
    # the origin is full: its pool cannot refill there, and says so; the donor's pool is untouched
    await wait_until(lambda: not placeholders(federation, "origin", bound=False), timeout=30, what="origin pool emptied")
    assert len(placeholders(federation, DONOR)) == 2
    assert "placeholders" in (await _metrics(hub))
    # a student freeing a GPU lets the pool refill
    await hub.api("DELETE", "/users/bob/server")
    await wait_until(lambda: len(placeholders(federation, "origin")) == 1, timeout=60, what="origin pool refilled")


async def _ready_pools(report_coro) -> dict | None:
    report = await report_coro
    return report if any(p["ready"] for p in report.get("pools") or []) else None


async def _metrics(hub) -> str:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{hub.url}/hub/metrics", headers={"Authorization": f"token {hub.token}"}) as resp:
            return await resp.text()


async def test_a_donor_pool_gives_way_to_a_spawn_that_needs_its_room(federation, start_hub):
    federation.donors[DONOR].store.create(PC, priority_class("gpuburst-warm-pool", -10))
    occupy(federation, "origin-gpu", 2, "hog")  # the origin is full
    occupy(federation, DONOR, 6, "others-on-donor")  # 2 of the donor's 8 granted GPUs are left
    hub = await start_hub(POOLS)
    await wait_until(lambda: len(placeholders(federation, DONOR)) == 2, timeout=30, what="donor pool ready")
    status, body = await hub.spawn("carol", {"profile": "gpu1"})
    assert status in (201, 202), body
    await hub.wait_ready("carol")
    pod = pod_of(federation, "carol")
    assert pod["spec"]["nodeName"] == DONOR
    # one placeholder made room; the other still holds the last granted GPU
    await wait_until(lambda: len(placeholders(federation, DONOR, bound=False)) == 1, timeout=30, what="donor pool shrunk to its room")


async def test_a_restarted_hub_adopts_its_pools_placeholders(federation, start_hub):
    federation.donors[DONOR].store.create(PC, priority_class("gpuburst-warm-pool", -10))
    hub = await start_hub(POOLS)
    await wait_until(lambda: len(placeholders(federation, "origin")) == 1, timeout=30, what="origin pool ready")
    await wait_until(lambda: len(placeholders(federation, DONOR)) == 2, timeout=30, what="donor pool ready")
    before = {p["metadata"]["uid"] for p in placeholders(federation)}
    await hub.stop()
    hub.start()
    await hub.wait_up()

    async def counted() -> dict | None:
        report = await capacity(hub)
        pools = {(p["site"], p["profile"]): p["ready"] for p in report.get("pools") or []}
        return pools if pools.get(("origin", "gpu1")) == 1 and pools.get((DONOR, "gpu1")) == 2 else None

    await wait_until(counted, timeout=30, what="the restarted hub's first pass")
    # the same placeholders, none added: a restart neither leaks nor double-books GPUs
    assert {p["metadata"]["uid"] for p in placeholders(federation, bound=False)} == before
