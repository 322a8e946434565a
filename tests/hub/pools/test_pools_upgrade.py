"""After an upgrade, on the local federation: the placeholders and pre-started kernels an older
hub left (another release, or made for another image) are drained and replaced by the pools,
never adopted; a kernel a student adopted before the upgrade is no pool's and stays."""

from __future__ import annotations

import asyncio

import pytest
from helpers.kernels import registry_on_federation
from kubernetes_asyncio.client import SchedulingV1Api

from jupyter_gpuburst.core import images, keys
from jupyter_gpuburst.hub.kernels import prestarted
from jupyter_gpuburst.hub.kernels.podstate import ready
from jupyter_gpuburst.hub.pools import stale
from jupyter_gpuburst.hub.pools.controller import PoolController
from jupyter_gpuburst.hub.pools.manifests import placeholder_pod, priority_class
from jupyter_gpuburst.hub.pools.settings import Pool, Shape, WarmPools
from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.testing import wait_until

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"
CLASS = "gpuburst-warm-pool"
OLD_RELEASE = "0.2.0"
KEY = "f" * 32
# room for the old hub's pods and their replacements side by side
FOUR_GPUS = {
    "origin": {
        "name": "origin",
        "nodes": [
            {"name": "origin-gpu", "cpu": "32", "memory": "128Gi", "resources": {GPU: 4}},
            {"name": "origin-cpu", "cpu": "8", "memory": "32Gi"},
        ],
    },
    "donors": [],
}
PLACEHOLDERS = Pool("origin", "gpu1", 1)
KERNELS = prestarted.pool_name("origin", "gpu-1")


def kernel(reg, image: str, release: str | None = None) -> dict:
    """A pre-started kernel of ``gpu-1`` made for ``image``, by the hub of ``release`` (this one's)."""
    pod = prestarted.pooled_pod("origin", reg.profiles["gpu-1"], reg.settings, image, "default", CLASS, [])
    if release:
        pod["metadata"]["labels"][keys.VERSION_LABEL] = release
    return pod


def alive(store, name: str) -> dict | None:
    try:
        pod = store.get("pods", "default", name)
    except ApiError:
        return None
    return None if pod["metadata"].get("deletionTimestamp") else pod


def pool_pods(store) -> list[dict]:
    pods, _ = store.list("pods", "default", label_selector=keys.POOL_LABEL)
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


async def test_an_upgrade_drains_the_old_hubs_pool_pods_and_replaces_them(tmp_path):
    async with registry_on_federation(tmp_path, FOUR_GPUS) as reg:
        store = reg.federation.origin.store
        store.create("priorityclasses.scheduling.k8s.io", priority_class(CLASS, -10))  # the old hub made it
        shape = Shape(image="jupyter/gpu:2", requests={}, limits={GPU: "1"})
        # what the hub of the release before left: a placeholder of its release, a waiting
        # kernel of the image it ran, and a kernel a student adopted from its pool
        old_placeholder = placeholder_pod(PLACEHOLDERS, shape, "default", CLASS)
        old_placeholder["metadata"]["labels"][keys.VERSION_LABEL] = OLD_RELEASE
        adopted = kernel(reg, "img-old", OLD_RELEASE)
        for label in prestarted.POOL_LABELS:
            adopted["metadata"]["labels"].pop(label)
        adopted["metadata"]["annotations"][keys.PRESTARTED_ANNOTATION] = KERNELS
        old = {store.create("pods", body, "default")["metadata"]["name"] for body in (old_placeholder, kernel(reg, "img-old"))}
        adopted_name = store.create("pods", adopted, "default")["metadata"]["name"]

        settings = WarmPools(
            pools=[{"site": "origin", "profile": "gpu1", "count": 1}], kernels=[{"site": "origin", "profile": "gpu-1", "count": 1}]
        )
        ctl = PoolController(
            settings,
            {"gpu1": shape},
            "default",
            reg.api,
            SchedulingV1Api(reg.api.api_client),
            reg.tracker,
            kernel_pods={KERNELS: lambda: kernel(reg, "img")},
        )

        async def replaced() -> list[dict] | None:
            await ctl.reconcile()
            pods = pool_pods(store)
            names = {p["metadata"]["name"] for p in pods}
            if names & old or len(pods) != 2:
                await asyncio.sleep(0.2)  # the hub's watch sees what went, then the pools refill
                return None
            return pods

        pods = await wait_until(replaced, timeout=60, what="the old hub's pool pods replaced")
        by_pool = {p["metadata"]["labels"][keys.POOL_LABEL]: p for p in pods}
        assert set(by_pool) == {PLACEHOLDERS.name, KERNELS}
        for pod, image in ((by_pool[PLACEHOLDERS.name], "jupyter/gpu:2"), (by_pool[KERNELS], "img")):
            assert pod["metadata"]["labels"][keys.VERSION_LABEL] == stale.RELEASE
            assert pod["metadata"]["annotations"][keys.POOL_IMAGE_ANNOTATION] == images.normalize(image)
            assert pod["spec"]["containers"][0]["image"] == image
        assert all(alive(store, name) is None for name in old)
        # the student's kernel is no pool's pod: the pools never touch it, whatever its release
        assert alive(store, adopted_name) is not None
        removed = {s["profile"]: s for s in ctl.report()}
        assert ctl.states[PLACEHOLDERS.name].removed == 1 and ctl.states[KERNELS].removed == 1, removed
        # and the next passes leave the new ones be
        await ctl.reconcile()
        assert {p["metadata"]["uid"] for p in pool_pods(store)} == {p["metadata"]["uid"] for p in pods}


async def test_a_waiting_kernel_of_another_release_or_image_is_never_adopted(tmp_path):
    async with registry_on_federation(tmp_path, FOUR_GPUS) as reg:
        store = reg.federation.origin.store
        reg.prestarted = {("origin", "gpu-1")}
        stale_ones = []
        for body in (kernel(reg, "img", OLD_RELEASE), kernel(reg, "img-old")):
            body["spec"].pop("priorityClassName")  # no warm pool's class here: the pods alone are under test
            stale_ones.append(store.create("pods", body, "default")["metadata"]["name"])
        for name in stale_ones:
            await wait_until(lambda name=name: ready(store.get("pods", "default", name)), timeout=60, what="the old kernel waits")
        await wait_until(
            lambda: {p["metadata"]["name"] for p in reg.tracker.pool_pods(KERNELS) if ready(p)} >= set(stale_ones),
            timeout=30,
            what="the hub's watch sees them waiting",
        )

        record = await start(reg, "k1")
        # a kernel of its own, with the key: neither waiting kernel got a Secret, or its labels
        assert record.prestarted is False and record.pod_name not in stale_ones
        secrets = {s["metadata"]["name"] for s in store.list("secrets", "default")[0]}
        assert not secrets & set(stale_ones)
        assert all(keys.POOL_LABEL in alive(store, name)["metadata"]["labels"] for name in stale_ones)

        # one this release made for the hub's image is adopted: the check refuses only the stale
        body = kernel(reg, "img")
        body["spec"].pop("priorityClassName")
        current = store.create("pods", body, "default")["metadata"]["name"]
        await wait_until(
            lambda: any(p["metadata"]["name"] == current and ready(p) for p in reg.tracker.pool_pods(KERNELS)),
            timeout=60,
            what="the current kernel waits",
        )
        second = await start(reg, "k2")
        assert second.prestarted is True and second.pod_name == current


async def start(reg, kernel_id: str):
    record = await reg.start(
        user="alice",
        groups=frozenset(),
        server_name="",
        server_pod=None,
        profile_slug="gpu-1",
        key=KEY,
        signature_scheme="hmac-sha256",
        kernel_id=kernel_id,
        notebook_dir="",
    )
    await reg.wait(record, 60)
    assert record.state == "running", record.error
    return record
