"""A CPU server starts GPU kernels through the hub: real JupyterHub, KubeSpawner, jupyter_server,
the provisioner and ipykernel, against the local federation (origin: 2 GPUs; donor-1: 8)."""

from __future__ import annotations

import asyncio
import base64
import json
from functools import partial

import aiohttp
import pytest
from helpers import user_server
from helpers.kernels import KERNEL_HUB, KERNEL_SCOPES

from jupyter_gpuburst.bench.cells import execute
from jupyter_gpuburst.core import keys
from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.testing import wait_until

pytestmark = pytest.mark.integration


WHERE = "import os; print(os.environ['JUPYTER_GPUBURST_SITE'], os.getcwd())"


def kernel_pods(federation) -> list[dict]:
    # every namespace: a donor kernel runs in its donor's kernel namespace
    items, _ = federation.origin.store.list("pods", label_selector=f"{keys.COMPONENT_LABEL}={keys.KERNEL_COMPONENT}")
    return items


def occupy_origin(federation, count: int) -> None:
    store = federation.origin.store
    try:
        store.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "others"}})
    except ApiError:
        pass
    store.create(
        "pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "someone-else", "namespace": "others"},
            "spec": {
                "nodeName": "origin-gpu",
                "containers": [
                    {"name": "c", "image": "busybox", "command": ["sleep", "600"], "resources": {"limits": {"nvidia.com/gpu": str(count)}}}
                ],
            },
        },
    )


async def user_token(hub, user: str, scopes: list[str]) -> str:
    status, data = await hub.api("POST", f"/users/{user}/tokens", {"scopes": scopes, "note": "kernel test"})
    assert status == 201, data
    return data["token"]


# a kernel's first start may wait for its pod: longer than the helper's default
server_api = partial(user_server.server_api, timeout=120)


async def kernel_api(hub, token: str, method: str, path: str = ""):
    async with aiohttp.ClientSession() as http:
        # through the hub's proxy, as any service (servers call the service's own address)
        async with http.request(
            method, f"{hub.url}/services/gpuburst/api/kernels{path}", headers={"Authorization": f"token {token}"}
        ) as response:
            text = await response.text()
            return response.status, (json.loads(text) if text and text.startswith("{") else text)


async def test_cpu_server_runs_gpu_kernels_on_origin_then_donor(federation, start_hub):
    hub = await start_hub(KERNEL_HUB)
    status, body = await hub.spawn("alice", {"profile": "cpu"})
    assert status in (201, 202), body
    await hub.wait_ready("alice")
    server_pod = federation.origin.store.get("pods", "default", "jupyter-alice")
    assert keys.SITE_LABEL not in (server_pod["metadata"].get("labels") or {})  # the server holds no GPU
    # the server reaches the kernel API at the service's own address, not through the proxy
    env = {e["name"]: e.get("value") for e in server_pod["spec"]["containers"][0]["env"]}
    kernels_url = env["JUPYTER_GPUBURST_KERNELS_URL"]
    assert kernels_url.startswith("http://127.0.0.1:") and kernels_url.endswith("/services/gpuburst/api/kernels")
    assert f":{hub.proxy_port}/" not in kernels_url and f":{hub.hub_port}/" not in kernels_url
    # kernel mode is a JupyterHub service: no deprecated extra_handlers
    assert "extra_handlers is deprecated" not in hub.log()

    # the launcher's kernelspecs come from the hub's GPU profiles
    status, specs = await server_api(hub, "alice", "GET", "/kernelspecs")
    assert status == 200
    gpu_spec = specs["kernelspecs"]["gpuburst-gpu-1"]["spec"]
    assert gpu_spec["display_name"] == "Python 3 (1 GPU)"
    assert gpu_spec["metadata"]["kernel_provisioner"]["provisioner_name"] == "gpuburst"

    # first GPU kernel: a free origin GPU
    status, first = await server_api(hub, "alice", "POST", "/kernels", {"name": "gpuburst-gpu-1"})
    assert status == 201, (first, hub.log_tail())
    out = await execute(f"{hub.url}/user/alice", hub.token, first["id"], WHERE)
    assert out["error"] is None, out
    assert "origin" in out["stdout"].split("\n")[-2], out
    assert "scratch" in out["stdout"]  # told once, with the first cell's output
    again = await execute(f"{hub.url}/user/alice", hub.token, first["id"], "print('again')")
    assert again["stdout"] == "again\n"

    (pod,) = kernel_pods(federation)
    assert pod["metadata"]["labels"][keys.SITE_LABEL] == "origin"
    assert pod["metadata"]["ownerReferences"][0]["uid"] == server_pod["metadata"]["uid"]
    secret = federation.origin.store.get("secrets", "default", pod["metadata"]["name"])
    connection_key = json.loads(base64.b64decode(secret["data"]["connection.json"]))["key"]
    assert len(connection_key) >= 16
    assert connection_key not in json.dumps(pod)
    assert secret["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]

    # the server's GPU panel data names the kernel's site; the kernel API never shows the key
    status, listing = await server_api(hub, "alice", "GET", "/gpuburst/kernels")
    assert status == 200 and [(k["site"], k["kernel_id"]) for k in listing["kernels"]] == [("origin", first["id"])]
    assert connection_key not in json.dumps(listing)
    # ...and its GPU use, as the kernel's pod measures it (a simulated GPU here)
    gpu = listing["kernels"][0]["gpu"]
    assert gpu["simulated"] and 0 < gpu["memory_used_bytes"] < gpu["memory_total_bytes"], gpu
    alice = await user_token(hub, "alice", KERNEL_SCOPES)
    status, listing = await kernel_api(hub, alice, "GET")
    assert status == 200 and [k["site"] for k in listing["kernels"]] == ["origin"]
    assert connection_key not in json.dumps(listing)
    # the launcher's availability: the origin's other GPU and the donor's 8
    (offered,) = [p for p in listing["profiles"] if p["slug"] == "gpu-1"]
    assert offered["available"] == {"origin": 1, "donors": 8, "sites": {"origin": 1, "donor-1": 8}}
    # the custom scope alone does not reach the service
    alice_no_access = await user_token(hub, "alice", ["custom:gpuburst:kernels"])
    status, refused = await kernel_api(hub, alice_no_access, "GET")
    assert status == 403 and "access:services!service=gpuburst" in refused["message"], refused

    # origin full (someone else holds its other GPU): the next kernel goes to the donor
    occupy_origin(federation, 1)
    status, second = await server_api(hub, "alice", "POST", "/kernels", {"name": "gpuburst-gpu-1"})
    assert status == 201, (second, hub.log_tail())
    out = await execute(f"{hub.url}/user/alice", hub.token, second["id"], WHERE)
    assert out["stdout"].split("\n")[-2].split()[0] == "donor-1", out
    assert sorted(p["metadata"]["labels"][keys.SITE_LABEL] for p in kernel_pods(federation)) == ["donor-1", "origin"]

    # another user sees none of it and cannot stop it; a user without the scope is refused
    bob = await user_token(hub, "bob", KERNEL_SCOPES)
    status, listing = await kernel_api(hub, bob, "GET")
    assert status == 200 and listing["kernels"] == []
    status, _ = await kernel_api(hub, alice, "GET")
    record_ids = [k["id"] for k in (await kernel_api(hub, alice, "GET"))[1]["kernels"]]
    assert len(record_ids) == 2
    for record_id in record_ids:
        status, _ = await kernel_api(hub, bob, "DELETE", f"/{record_id}")
        assert status == 404
    await hub.create_user("carol")
    carol = await user_token(hub, "carol", [])
    status, refused = await kernel_api(hub, carol, "GET")
    assert status == 403 and "custom:gpuburst:kernels" in refused["message"], refused
    assert len(kernel_pods(federation)) == 2

    # shutting the origin kernel down frees its GPU at once: the next kernel gets it
    status, _ = await server_api(hub, "alice", "DELETE", f"/kernels/{first['id']}")
    assert status == 204
    # (a pending kernel's shutdown finishes after the answer, within a poll of the hub)
    await wait_until(
        lambda: [p["metadata"]["labels"][keys.SITE_LABEL] for p in kernel_pods(federation)] == ["donor-1"],
        timeout=10,
        what="origin kernel pod gone",
    )
    status, third = await server_api(hub, "alice", "POST", "/kernels", {"name": "gpuburst-gpu-1"})
    assert status == 201, third
    out = await execute(f"{hub.url}/user/alice", hub.token, third["id"], WHERE)
    assert out["stdout"].split("\n")[-2].split()[0] == "origin", out

    # the key never reached the hub's log
    assert connection_key not in hub.log_path.read_text()

    # stopping the server stops its kernels
    status, _ = await hub.api("DELETE", "/users/alice/server")
    assert status in (202, 204)
    await wait_until(lambda: not kernel_pods(federation), timeout=30, what="kernel pods gone with the server")


def donor_kernel_twins(federation, donor: str) -> list[dict]:
    """The donor's copies of offloaded kernel pods (Liqo's reflection), in every namespace."""
    items, _ = federation.donors[donor].store.list("pods", label_selector=f"{keys.COMPONENT_LABEL}={keys.KERNEL_COMPONENT}")
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


# as the chaos benchmark's donor loss: long enough for the virtual node to be NotReady and every
# watch on the donor to break, short of the 300 s after which Kubernetes evicts its pods
DONOR_LOST_S = 15.0


async def test_a_gpu_kernel_on_a_donor_lost_for_a_while_keeps_running_once_and_nothing_is_left(federation, start_hub):
    """The donor's control plane goes (on the real one every process SIGKILLed) while a GPU
    kernel runs there. Its node agent and the kernel's process run on, as a cluster's data plane
    does: the notebook still computes meanwhile, and once the donor is back the kernel is the
    same process, with one pod on the origin and one twin on the donor, neither duplicated nor
    orphaned once its server stops."""
    hub = await start_hub(KERNEL_HUB)
    status, body = await hub.spawn("alice", {"profile": "cpu"})
    assert status in (201, 202), body
    await hub.wait_ready("alice")
    occupy_origin(federation, 2)  # the origin full: the kernel goes to the donor
    status, kernel = await server_api(hub, "alice", "POST", "/kernels", {"name": "gpuburst-gpu-1"})
    assert status == 201, (kernel, hub.log_tail())
    lab = f"{hub.url}/user/alice"
    out = await execute(lab, hub.token, kernel["id"], f"{WHERE}; import os; pid = os.getpid()")
    assert out["stdout"].split("\n")[-2].split()[0] == "donor-1", out
    (pod,) = kernel_pods(federation)
    await wait_until(lambda: len(donor_kernel_twins(federation, "donor-1")) == 1, timeout=30, what="the kernel's twin on the donor")

    await federation.donor_outage("donor-1", True)
    try:
        await asyncio.sleep(DONOR_LOST_S / 2)
        during = await execute(lab, hub.token, kernel["id"], "print(pid * 2)")
        assert during["error"] is None and during["stdout"].strip(), during
        await asyncio.sleep(DONOR_LOST_S / 2)
    finally:
        await federation.donor_outage("donor-1", False)

    # back: the same kernel process, still reached, on one pod and one twin
    after = await execute(lab, hub.token, kernel["id"], "import os; print(os.getpid() == pid)", timeout=120)
    assert after["stdout"].strip() == "True", after
    assert [p["metadata"]["uid"] for p in kernel_pods(federation)] == [pod["metadata"]["uid"]]
    await wait_until(lambda: len(donor_kernel_twins(federation, "donor-1")) == 1, timeout=60, what="the donor's cache read again")
    status, listing = await server_api(hub, "alice", "GET", "/gpuburst/kernels")
    assert status == 200 and [(k["site"], k["kernel_id"]) for k in listing["kernels"]] == [("donor-1", kernel["id"])], listing

    status, _ = await hub.api("DELETE", "/users/alice/server")
    assert status in (202, 204)
    await wait_until(lambda: not kernel_pods(federation), timeout=60, what="the kernel's pod gone with its server")
    await wait_until(lambda: not donor_kernel_twins(federation, "donor-1"), timeout=60, what="the kernel's twin gone from the donor")


async def test_kernel_that_cannot_be_placed_fails_fast_with_the_reason(federation, start_hub):
    hub = await start_hub(KERNEL_HUB)
    await hub.spawn("alice", {"profile": "cpu"})
    await hub.wait_ready("alice")
    # the origin-only profile, with the origin full: no site may take it
    occupy_origin(federation, 2)
    status, body = await server_api(hub, "alice", "POST", "/kernels", {"name": "gpuburst-gpu-1-origin"})
    # a GPU kernel is a pending kernel: it exists at once (a cell run meanwhile waits for it),
    # and its model turns dead with the hub's reason as soon as the hub refuses it
    assert status == 201 and body["execution_state"] == "starting", body
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        status, model = await server_api(hub, "alice", "GET", f"/kernels/{body['id']}")
        assert status == 200, model
        if model["execution_state"] == "dead" or asyncio.get_running_loop().time() > deadline:
            break
        await asyncio.sleep(0.2)
    assert model["execution_state"] == "dead", model
    # placement reasons name the resource by its short name (nvidia.com/gpu: "GPU")
    message = " ".join(model["reason"].split())  # wrapped to fit JupyterLab's error dialog
    assert "No GPU kernel" in message and "1 GPU" in message and "origin 0 of 2 free" in message, body
    assert kernel_pods(federation) == []
