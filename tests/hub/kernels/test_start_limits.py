"""A GPU kernel start's limits hold under concurrency, and a failed start leaves nothing behind:
the kernel limit and the budget are checked and the start recorded in one step per user, a
queued kernel is asked again when its turn comes, and a Secret or pod made by a create that
failed after going through is deleted. The hub's kernel registry on the local federation."""

from __future__ import annotations

import asyncio

import pytest
from helpers.kernels import registry_on_federation
from kubernetes_asyncio.client import ApiException

from jupyter_gpuburst.hub.kernels import prestarted
from jupyter_gpuburst.hub.kernels.registry import KernelError, Refused
from jupyter_gpuburst.hub.kernels.settings import GPUKernelSettings
from jupyter_gpuburst.sim.testing import wait_until

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"
KEY = "f" * 32
USED_UP = "Your GPU-hour budget is used up: 0 of 1 GPU-hours left this week."


@pytest.fixture
async def registry(tmp_path):
    async with registry_on_federation(tmp_path) as reg:
        yield reg


def start(registry, user: str = "alice", **overrides):
    args = dict(
        user=user,
        groups=frozenset(),
        server_name="",
        server_pod=None,
        profile_slug="gpu-1",
        key=KEY,
        signature_scheme="hmac-sha256",
        kernel_id="",
        notebook_dir="",
    )
    return registry.start(**{**args, **overrides})


def kernel_objects(registry, kind: str) -> list[str]:
    items, _ = registry.federation.origin.store.list(kind, "default")
    return [o["metadata"]["name"] for o in items if o["metadata"]["name"].startswith("gpuburst-kernel-")]


def hold(store, node: str, count: int, name: str) -> None:
    """Someone else's pod holding ``count`` GPUs of ``node``."""
    try:
        store.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "others"}})
    except Exception:  # noqa: BLE001 - already there
        pass
    spec = {"nodeName": node, "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {GPU: str(count)}}}]}
    store.create("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "others"}, "spec": spec})


def test_a_user_may_have_two_gpu_kernels_unless_the_admin_says_otherwise():
    assert GPUKernelSettings().max_kernels_per_user == 2


async def test_concurrent_starts_cannot_pass_the_kernel_limit_together(registry, monkeypatch):
    claim = prestarted.claim

    async def pool_read(*args):
        # a warm pool's read, between the limit's check and the start's record
        await asyncio.sleep(0.05)
        return await claim(*args)

    monkeypatch.setattr(prestarted, "claim", pool_read)
    outcomes = await asyncio.gather(*(start(registry, kernel_id=f"k{i}") for i in range(4)), return_exceptions=True)
    refused = [o for o in outcomes if isinstance(o, KernelError)]
    assert len(refused) == 2 and all(o.status == 409 for o in refused), outcomes
    assert len(registry.list("alice")) == 2
    # another user is not held up behind alice
    assert (await start(registry, user="bob")).user == "bob"


async def test_a_refused_budget_makes_nothing(registry):
    with pytest.raises(Refused) as info:
        await start(registry, refusal=lambda: USED_UP)
    assert info.value.status == 403 and info.value.message == USED_UP
    assert registry.records == {} and kernel_objects(registry, "pods") == []
    assert len(registry.tracker.placer.reservations) == 0


async def test_a_queued_kernel_is_asked_again_when_its_turn_comes(registry):
    registry.settings.queue_when_full = True
    store = registry.federation.origin.store
    hold(store, "origin-gpu", 2, "origin-hog")
    hold(store, "donor-1", 8, "donor-hog")

    def full() -> bool:
        snapshot = registry.tracker.snapshot()
        return all(snapshot.site(s).free.get(GPU, 0) == 0 for s in ("origin", "donor-1"))

    await wait_until(full, timeout=10, what="every site seen full")
    budget: list[str | None] = [None]
    record = await start(registry, refusal=lambda: budget[0])
    assert record.state == "pending"
    # while it waits, the user's other sessions use up the budget
    budget[0] = USED_UP
    store.delete("pods", "others", "origin-hog", grace_period_seconds=0)
    await registry.wait(record, 20)
    assert record.state == "failed" and record.error == USED_UP
    assert kernel_objects(registry, "pods") == [] and kernel_objects(registry, "secrets") == []
    assert len(registry.tracker.placer.reservations) == 0


@pytest.mark.parametrize("call", ["create_namespaced_secret", "create_namespaced_pod", "patch_namespaced_secret"])
async def test_a_create_that_went_through_before_its_error_leaves_nothing_behind(registry, monkeypatch, call):
    real = getattr(registry.api, call)

    async def went_through_then_failed(*args, **kwargs):
        # its first try went through and its answer was lost; the retry found it made
        await real(*args, **kwargs)
        raise ApiException(status=409, reason="AlreadyExists")

    monkeypatch.setattr(registry.api, call, went_through_then_failed)
    with pytest.raises(KernelError) as info:
        await start(registry)
    assert info.value.status == 500
    await wait_until(lambda: kernel_objects(registry, "pods") == [], timeout=20, what="the kernel pod deleted")
    assert kernel_objects(registry, "secrets") == [] and registry.records == {}
    assert len(registry.tracker.placer.reservations) == 0
