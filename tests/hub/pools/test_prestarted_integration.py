"""Pre-started GPU kernels on a real hub, real user servers (their provisioner, ipykernel) and the
local federation: the next GPU kernel adopts one with a key of its own, the pool refills, and a
pre-started kernel that goes mid-adoption leaves the request a kernel of its own and nothing else."""

from __future__ import annotations

import base64
import json
from functools import partial

import aiohttp
import kubernetes_validate
import pytest
from helpers import user_server
from helpers.admission import on_create
from helpers.federation import occupy, pod_of
from helpers.kernels import KERNEL_SCOPES

from jupyter_gpuburst.bench.cells import execute
from jupyter_gpuburst.core import keys
from jupyter_gpuburst.hub.kernels.podstate import ready
from jupyter_gpuburst.hub.kernels.prestarted import CONNECTION_VOLUME, pool_name
from jupyter_gpuburst.sim.testing import wait_until

pytestmark = pytest.mark.integration

POOL = pool_name("origin", "gpu-1")
PRESTARTED_HUB = """
from jupyter_gpuburst.hub import install
c.WarmPools.kernels = [{"site": "origin", "profile": "gpu-1", "count": 1}]
c.WarmPools.interval_seconds = 0.5
install(c)
c.JupyterHub.load_groups = {"gpu-students": {"users": ["alice", "bob"]}}
c.JupyterHub.load_roles.append({"name": "gpu-kernels", "scopes": ["custom:gpuburst:kernels", "access:services!service=gpuburst"], "groups": ["gpu-students"]})
c.GPUKernelSettings.reap_interval_seconds = 1
c.GPUKernelSettings.extra_env = {"JUPYTER_GPUBURST_BACKEND": "simulated"}
"""
WHO = "import os; print(os.environ['JUPYTER_GPUBURST_SITE'], os.environ['JUPYTERHUB_USER'], 'JUPYTER_GPUBURST_KERNEL_CONNECTION' in str(os.environ))"
server_api = partial(user_server.server_api, timeout=120)


def waiting(federation) -> list[dict]:
    """The pool's kernels that wait, Ready (their imports done)."""
    pods, _ = federation.origin.store.list("pods", "default", label_selector=f"{keys.POOL_LABEL}={POOL}")
    return [p for p in pods if not p["metadata"].get("deletionTimestamp") and ready(p)]


def pod_named(federation, name: str) -> dict | None:
    pods, _ = federation.origin.store.list("pods", "default")
    return next((p for p in pods if p["metadata"]["name"] == name), None)


def secret_key(federation, name: str) -> str:
    secret = federation.origin.store.get("secrets", "default", name)
    return json.loads(base64.b64decode(secret["data"][keys.KERNEL_CONNECTION_FILE]))["key"]


async def capacity(hub) -> dict:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{hub.url}/services/gpuburst/api/capacity", headers={"Authorization": f"token {hub.token}"}) as resp:
            assert resp.status == 200
            return await resp.json(content_type=None)


async def start_servers(hub, *users: str) -> None:
    for user in users:
        status, body = await hub.spawn(user, {"profile": "cpu"})
        assert status in (201, 202), body
    for user in users:
        await hub.wait_ready(user)


async def gpu_kernel(hub, user: str) -> str:
    """Start a GPU kernel in ``user``'s server (its id), as a student's click does: no waiting."""
    status, kernel = await server_api(hub, user, "POST", "/kernels", {"name": "gpuburst-gpu-1"})
    assert status == 201, (kernel, hub.log_tail(3000))
    return kernel["id"]


async def record_of(hub, user: str, kernel_id: str) -> dict:
    """The hub's record of a kernel, as its kernel API shows it to the user."""
    status, data = await hub.api("POST", f"/users/{user}/tokens", {"scopes": KERNEL_SCOPES, "note": "test"})
    assert status == 201, data
    async with aiohttp.ClientSession() as http:
        url = f"{hub.url}/services/gpuburst/api/kernels"
        async with http.get(url, headers={"Authorization": f"token {data['token']}"}) as response:
            assert response.status == 200
            listing = await response.json(content_type=None)
    (record,) = [k for k in listing["kernels"] if k["kernel_id"] == kernel_id]
    return record


async def test_the_next_gpu_kernel_adopts_a_pre_started_one_with_a_key_of_its_own(federation, start_hub):
    hub = await start_hub(PRESTARTED_HUB)
    await start_servers(hub, "alice", "bob")
    first = await wait_until(lambda: waiting(federation) or None, timeout=60, what="a pre-started kernel waiting")
    (pooled,) = first
    name = pooled["metadata"]["name"]
    kubernetes_validate.validate(pooled, "1.31", strict=True)
    # a kernel pod as the hub's others (restricted, no token), at the pool's priority, with no key
    spec = pooled["spec"]
    assert spec["priority"] == -10 and spec["automountServiceAccountToken"] is False
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    (volume,) = [v for v in spec["volumes"] if v["name"] == CONNECTION_VOLUME]
    assert volume["secret"] == {"secretName": name, "optional": True, "defaultMode": 0o400}
    env = {e["name"] for e in spec["containers"][0]["env"]}
    assert keys.KERNEL_CONNECTION_ENV not in env and "JUPYTERHUB_USER" not in env
    assert not federation.origin.store.list("secrets", "default", field_selector=f"metadata.name={name}")[0]
    # its GPU counts as free (the launcher offers both origin GPUs)
    assert pooled["metadata"]["labels"][keys.COMPONENT_LABEL] == keys.KERNEL_COMPONENT

    alice_kernel = await gpu_kernel(hub, "alice")
    out = await execute(f"{hub.url}/user/alice", hub.token, alice_kernel, WHO)
    assert out["error"] is None, out
    assert out["stdout"].split("\n")[-2] == "origin alice False", out
    alice_record = await record_of(hub, "alice", alice_kernel)
    # the fast path: alice's kernel is the pod that waited, now hers as any kernel pod she starts
    assert alice_record["pod"] == name and alice_record["prestarted"] is True, alice_record
    adopted = pod_named(federation, name)
    server_uid = federation.origin.store.get("pods", "default", "jupyter-alice")["metadata"]["uid"]
    assert adopted["metadata"]["ownerReferences"][0]["uid"] == server_uid
    assert adopted["metadata"]["annotations"][keys.PRESTARTED_ANNOTATION] == POOL
    assert adopted["metadata"]["annotations"][keys.USER_ANNOTATION] == "alice"
    labels = adopted["metadata"]["labels"]
    assert labels[keys.SITE_LABEL] == "origin" and keys.POOL_LABEL not in labels and keys.POOL_KIND_LABEL not in labels
    kubernetes_validate.validate(adopted, "1.31", strict=True)
    alice_key = secret_key(federation, name)
    secret = federation.origin.store.get("secrets", "default", name)
    assert secret["metadata"]["ownerReferences"][0]["uid"] == adopted["metadata"]["uid"]
    assert alice_key not in json.dumps(adopted)

    # the pool refills; bob's kernel adopts the new one, with a key of its own
    refilled = await wait_until(
        lambda: [p for p in waiting(federation) if p["metadata"]["name"] != name] or None, timeout=60, what="the pool refilled"
    )
    bob_kernel = await gpu_kernel(hub, "bob")
    out = await execute(f"{hub.url}/user/bob", hub.token, bob_kernel, WHO)
    assert out["stdout"].split("\n")[-2] == "origin bob False", out
    bob_record = await record_of(hub, "bob", bob_kernel)
    assert bob_record["prestarted"] is True and bob_record["pod"] == refilled[0]["metadata"]["name"], bob_record
    bob_key = secret_key(federation, bob_record["pod"])
    assert bob_key != alice_key
    # the key is in neither the hub's API nor its log
    status, listing = await server_api(hub, "alice", "GET", "/gpuburst/kernels")
    assert alice_key not in json.dumps(listing)
    assert alice_key not in hub.log_path.read_text() and bob_key not in hub.log_path.read_text()

    # the capacity report shows the pool apart, as a pool of kernels
    report = await capacity(hub)
    assert [(p["site"], p["profile"], p["kind"]) for p in report["pools"]] == [("origin", "gpu-1", "kernels")]

    # the ledger: the time the kernels waited is the pool's, from adoption on the students'
    async def usage() -> dict | None:
        async with aiohttp.ClientSession() as http:
            url = f"{hub.url}/services/gpuburst/api/usage?period=day&by=user,mode"
            async with http.get(url, headers={"Authorization": f"token {hub.token}"}) as resp:
                rows = {(r["user"], r["mode"]): r for r in (await resp.json(content_type=None))["rows"]}
        wanted = {("(warm pool)", "pool"), ("alice", "kernel"), ("bob", "kernel")}
        return rows if wanted <= set(rows) else None

    rows = await wait_until(usage, timeout=30, what="the pool's and the students' GPU time in the ledger")
    assert rows[("(warm pool)", "pool")]["sessions"] >= 2  # the two adopted kernels' waits (and the refill's)
    assert rows[("alice", "kernel")]["sessions"] == 1 and rows[("bob", "kernel")]["sessions"] == 1


@pytest.mark.parametrize("grace", [0, None], ids=["removed", "preempted-with-its-grace-period"])
async def test_a_pre_started_kernel_that_goes_mid_adoption_leaves_a_kernel_of_its_own_and_nothing_else(federation, start_hub, grace):
    hub = await start_hub(PRESTARTED_HUB)
    await start_servers(hub, "alice")
    (pooled,) = await wait_until(lambda: waiting(federation) or None, timeout=60, what="a pre-started kernel waiting")
    name = pooled["metadata"]["name"]
    store = federation.origin.store

    def preempt() -> None:
        store.delete("pods", "default", name, grace_period_seconds=grace)

    # the moment the hub writes the adopter's Secret, before the hub goes on, the pod goes: at
    # once, or as a preemption deletes it, with its own grace period (None: the pod's)
    async with on_create(federation, federation.origin, "secrets", name, preempt) as preempted:
        kernel_id = await gpu_kernel(hub, "alice")
        try:
            out = await execute(f"{hub.url}/user/alice", hub.token, kernel_id, WHO)
        except TimeoutError:
            # what the hub did with the request, for the failure message
            pytest.fail("no reply from the kernel:\n" + "\n".join(line for line in hub.log().splitlines() if "GPU kernel" in line))
    assert preempted == [name]
    assert out["error"] is None and out["stdout"].split("\n")[-2] == "origin alice False", out
    record = await record_of(hub, "alice", kernel_id)
    # a kernel of its own, not the pod that went; no Secret left of the one that went
    assert record["pod"] != name and record["prestarted"] is False, record
    await wait_until(
        lambda: not store.list("secrets", "default", field_selector=f"metadata.name={name}")[0], timeout=10, what="its Secret removed"
    )
    await wait_until(lambda: pod_named(federation, name) is None, timeout=30, what="the pod that went is gone")
    log = hub.log()
    assert f"pre-started kernel {name} went" in log or f"pre-started pod {name} went" in log, log[-3000:]


async def test_a_gpu_server_takes_a_pre_started_kernels_gpu_at_once(federation, start_hub):
    occupy(federation, "origin-gpu", 1, "hog")  # the origin's last GPU is the pre-started kernel's
    hub = await start_hub(PRESTARTED_HUB)
    (pooled,) = await wait_until(lambda: waiting(federation) or None, timeout=60, what="a pre-started kernel waiting")
    status, body = await hub.spawn("carol", {"profile": "gpu1-local"})
    assert status in (201, 202), body
    await hub.wait_ready("carol")
    assert pod_of(federation, "carol")["spec"]["nodeName"] == "origin-gpu"
    # it gave way, and waits for room rather than hold any GPU: the origin has none
    assert pod_named(federation, pooled["metadata"]["name"]) is None
    assert not waiting(federation)


async def test_a_restarted_hub_keeps_adopted_kernels_and_the_pool_without_doubling_it(federation, start_hub):
    hub = await start_hub(PRESTARTED_HUB)
    await start_servers(hub, "alice")
    await wait_until(lambda: waiting(federation) or None, timeout=60, what="a pre-started kernel waiting")
    kernel_id = await gpu_kernel(hub, "alice")
    out = await execute(f"{hub.url}/user/alice", hub.token, kernel_id, "x = 41")
    assert out["error"] is None, out
    (refilled,) = await wait_until(lambda: waiting(federation) or None, timeout=60, what="the pool refilled")
    await hub.stop()
    hub.start()
    await hub.wait_up()
    # the adopted kernel is alice's still (its record rebuilt from its pod, her server's own id of
    # the kernel with it), the pool the same pod
    record = await record_of(hub, "alice", kernel_id)
    assert record["prestarted"] is True and record["state"] == "running", record
    out = await execute(f"{hub.url}/user/alice", hub.token, kernel_id, "print(x + 1)")
    assert out["stdout"] == "42\n", out

    async def counted() -> list | None:
        pools = (await capacity(hub)).get("pools") or []
        return pools if pools and pools[0]["ready"] == 1 else None

    await wait_until(counted, timeout=30, what="the restarted hub's first pass over its pools")
    # the same waiting kernel, none added: a restart neither leaks nor double-books a GPU
    assert [p["metadata"]["name"] for p in waiting(federation)] == [refilled["metadata"]["name"]]
