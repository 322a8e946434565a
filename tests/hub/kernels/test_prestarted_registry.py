"""Adopting pre-started kernels in the hub's kernel registry on the local federation: only a Secret
the hub writes itself gives a waiting kernel its key, and a request the waiting kernel cannot
serve (the user's files, a restart's ports) starts a pod of its own and leaves it waiting."""

from __future__ import annotations

import base64
import json

import pytest
from helpers.kernels import registry_on_federation

from jupyter_gpuburst.core import keys
from jupyter_gpuburst.hub.kernels import prestarted
from jupyter_gpuburst.hub.kernels.files import KernelFiles
from jupyter_gpuburst.hub.kernels.podstate import ready
from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.testing import wait_until

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"
KEY = "f" * 32


@pytest.fixture
async def registry(tmp_path):
    """A registry whose origin has one pre-started kernel of ``gpu-1`` waiting (imports done)."""
    async with registry_on_federation(tmp_path) as reg:
        fed = reg.federation
        reg.prestarted = {("origin", "gpu-1")}
        pod = prestarted.pooled_pod("origin", reg.profiles["gpu-1"], reg.settings, "img", "default", "system-node-critical", [])
        pod["spec"].pop("priorityClassName")  # no warm pool's class in this federation: the pod alone is under test
        reg.pooled = fed.origin.store.create("pods", pod, "default")["metadata"]["name"]
        await wait_until(lambda: ready(fed.origin.store.get("pods", "default", reg.pooled)), timeout=60, what="the kernel waits")
        await seen_waiting(reg, reg.pooled, "origin")
        yield reg


async def seen_waiting(registry, name: str, site: str) -> None:
    """Until the hub's pod watch has the pool's pod waiting, where requests look for it."""
    pool = prestarted.pool_name(site, "gpu-1")
    await wait_until(
        lambda: any(p["metadata"]["name"] == name and ready(p) for p in registry.tracker.pool_pods(pool)),
        timeout=30,
        what="the hub's watch sees the kernel waiting",
    )


async def start(registry, **overrides):
    args = dict(
        user="alice",
        groups=frozenset(),
        server_name="",
        server_pod=None,
        profile_slug="gpu-1",
        key=KEY,
        signature_scheme="hmac-sha256",
        kernel_id="k1",
        notebook_dir="",
    )
    args.update(overrides)
    record = await registry.start(**args)
    await registry.wait(record, 60)
    assert record.state == "running", record.error
    return record


def pod(registry, name: str) -> dict | None:
    try:
        found = registry.federation.origin.store.get("pods", "default", name)
    except ApiError:
        return None
    return None if found["metadata"].get("deletionTimestamp") else found


async def test_a_secret_someone_made_beforehand_makes_the_waiting_kernel_nobodys(registry):
    store = registry.federation.origin.store
    # someone who may create Secrets in the namespace plants a connection with a key they know
    planted = prestarted.adoption_secret(
        {"metadata": {"name": registry.pooled, "namespace": "default", "uid": "x"}},
        "m" * 32,
        "hmac-sha256",
        registry.settings.ports(0),
        {},
        prestarted.site_placement("origin", registry.profiles["gpu-1"]),
    )
    planted["metadata"].pop("ownerReferences")
    store.create("secrets", planted, "default")
    record = await start(registry)
    # not adopted: the waiting pod is removed, the request got a pod of its own
    assert record.prestarted is False and record.pod_name != registry.pooled
    await wait_until(lambda: pod(registry, registry.pooled) is None, timeout=30, what="the waiting kernel removed")
    secret = store.get("secrets", "default", record.pod_name)
    assert json.loads(base64.b64decode(secret["data"][keys.KERNEL_CONNECTION_FILE]))["key"] == KEY
    # the planted Secret is not the hub's to remove, and never reached a kernel
    kept = store.get("secrets", "default", registry.pooled)
    assert json.loads(base64.b64decode(kept["data"][keys.KERNEL_CONNECTION_FILE]))["key"] == "m" * 32


async def test_a_request_the_waiting_kernel_cannot_serve_starts_its_own_and_leaves_it_waiting(registry):
    # the files policy gives this request the user's files: a waiting kernel has scratch only
    registry.settings.files_policy = lambda request: KernelFiles(working_dir="/home/jovyan")
    record = await start(registry)
    assert record.prestarted is False and record.files == "volume" and record.pod_name != registry.pooled
    waiting = pod(registry, registry.pooled)
    assert waiting is not None and keys.POOL_LABEL in waiting["metadata"]["labels"]
    assert not registry.federation.origin.store.list("secrets", "default", field_selector=f"metadata.name={registry.pooled}")[0]
    await registry.stop(record)

    # a policy that gives scratch space (None) lets the request adopt it
    registry.settings.files_policy = lambda request: None
    record = await start(registry)
    assert record.prestarted is True and record.pod_name == registry.pooled


async def test_a_restart_on_the_other_ports_starts_its_own(registry):
    record = await start(registry, port_set=1)
    assert record.prestarted is False and record.pod_name != registry.pooled
    assert pod(registry, registry.pooled) is not None


async def test_two_requests_at_once_never_share_a_waiting_kernel(registry, monkeypatch):
    import asyncio

    # both list the pool before either takes a kernel: the same waiting kernel is in both lists
    listed = asyncio.Barrier(2)
    candidates = prestarted.candidates
    calls = []

    async def both_listed(*args, **kwargs):
        found = await candidates(*args, **kwargs)
        calls.append(found)
        if len(calls) <= 2:
            await listed.wait()
        return found

    monkeypatch.setattr(prestarted, "candidates", both_listed)
    first, second = await asyncio.gather(start(registry, user="alice"), start(registry, user="bob"))
    assert len(calls[0]) == len(calls[1]) == 1
    # one adopted it, the other started its own; both run, each with its own key's Secret
    assert sorted([first.prestarted, second.prestarted]) == [False, True]
    adopter = first if first.prestarted else second
    assert adopter.pod_name == registry.pooled and pod(registry, registry.pooled) is not None
    other = second if adopter is first else first
    assert other.pod_name != registry.pooled and pod(registry, other.pod_name) is not None
    adopted = registry.federation.origin.store.get("pods", "default", registry.pooled)
    assert adopted["metadata"]["annotations"][keys.USER_ANNOTATION] == adopter.user


async def test_a_pre_started_kernel_on_a_donor_in_the_servers_namespace_never_gets_a_key(tmp_path):
    # the servers' namespace is offloaded to every donor: an adopter's Secret there would reach
    # them all. The request starts a pod of its own in the donor's kernel namespace, which
    # answers with its key; the waiting kernel gets no Secret
    import secrets

    from jupyter_gpuburst.bench.kernels import first_reply
    from jupyter_gpuburst.core import liqo
    from jupyter_gpuburst.hub.settings import GPUBurstSettings
    from jupyter_gpuburst.sim.peering import NSOFF

    async with registry_on_federation(tmp_path) as reg:
        fed = reg.federation
        fed.origin.store.create(NSOFF, liqo.namespace_offloading("default"), "default")
        reg.tracker.placer.policy = GPUBurstSettings(strategy="donor-only").policy()
        reg.prestarted = {("donor-1", "gpu-1")}
        body = prestarted.pooled_pod("donor-1", reg.profiles["gpu-1"], reg.settings, "img", "default", "system-node-critical", [])
        body["spec"].pop("priorityClassName")
        name = fed.origin.store.create("pods", body, "default")["metadata"]["name"]
        await wait_until(lambda: ready(fed.origin.store.get("pods", "default", name)), timeout=60, what="the donor's kernel waits")
        await seen_waiting(reg, name, "donor-1")

        key = secrets.token_hex(16)
        record = await start(reg, key=key)
        assert record.prestarted is False and record.pod_name != name and record.placement.site == "donor-1"
        assert record.namespace == "default-kernels-donor-1"
        connection = {"transport": "tcp", "ip": reg.pod_ip(record), **record.ports}
        await first_reply(connection, key.encode(), timeout=30)
        assert name not in {s["metadata"]["name"] for s in fed.origin.store.list("secrets", "default")[0]}


@pytest.fixture
def pool_lists(registry, monkeypatch):
    """Each list of a pool's pods the registry asks of the API server (its arguments)."""
    calls = []
    list_pods = registry.api.list_namespaced_pod

    async def listed(namespace, **kwargs):
        if kwargs.get("label_selector", "").startswith(keys.POOL_LABEL):
            calls.append(kwargs)
        return await list_pods(namespace, **kwargs)

    monkeypatch.setattr(registry.api, "list_namespaced_pod", listed)
    return calls


async def test_a_request_finds_its_waiting_kernel_in_the_hub_s_watch_without_listing_the_pool(registry, pool_lists):
    # at a lab's start a pool is hundreds of pods and every request looks for one: listing
    # and parsing it each time was a fifth of the hub's work; the hub's pod watch has them all
    record = await start(registry)
    assert record.prestarted is True and record.pod_name == registry.pooled
    assert pool_lists == []
    # adopted, it leaves its pool in the watch's view too: the next request starts its own
    await wait_until(
        lambda: not registry.tracker.pool_pods(prestarted.pool_name("origin", "gpu-1")), timeout=30, what="the pool empty in the watch"
    )
    second = await start(registry, kernel_id="k2", key="e" * 32)
    assert second.prestarted is False


async def test_a_hub_that_sees_another_namespace_lists_the_pool_where_it_waits(registry, pool_lists, monkeypatch):
    # a hub bound a namespaced Role watches that namespace's pods only (docs/security.md): a
    # pool elsewhere is read from the API server, running pods only, as before the watch had it
    monkeypatch.setattr(registry.tracker, "pods_namespace", "elsewhere")
    record = await start(registry)
    assert record.prestarted is True and record.pod_name == registry.pooled
    assert pool_lists and all(c["limit"] == prestarted.PAGE and "status.phase=Running" in c["field_selector"] for c in pool_lists)
