"""GPU kernels are culled by their own GPU: an idle one is warned, then its pod goes and the
notebook's server hears why (and nothing restarts it on its own); a computing one is kept. Real
JupyterHub, jupyter_server, provisioner and ipykernel in kernel pods, on the local federation."""

from __future__ import annotations

import asyncio

import pytest
from helpers.user_server import server_api

from jupyter_gpuburst.bench.cells import execute
from jupyter_gpuburst.core import keys
from jupyter_gpuburst.sim.testing import wait_until

pytestmark = pytest.mark.integration

TIMEOUT_S = 10

KERNEL_CULLING_HUB = f"""
c.GPUCullingSettings.period_seconds = 1
c.GPUCullingSettings.kernel_profiles = {{"gpu-1": {{"enabled": True, "timeout_seconds": {TIMEOUT_S}, "warning_seconds": 5}}}}
from jupyter_gpuburst.hub import install
install(c)
c.JupyterHub.load_groups = {{"gpu-students": {{"users": ["alice"]}}}}
c.JupyterHub.load_roles.append({{"name": "gpu-kernels", "scopes": ["custom:gpuburst:kernels", "access:services!service=gpuburst"], "groups": ["gpu-students"]}})
c.GPUKernelSettings.extra_env = {{"JUPYTER_GPUBURST_BACKEND": "simulated"}}
"""


def kernel_pods(federation) -> list[dict]:
    items, _ = federation.origin.store.list("pods", "default", label_selector=f"{keys.COMPONENT_LABEL}={keys.KERNEL_COMPONENT}")
    return items


def kernels_with_pods(federation) -> set[str]:
    """The server's ids of the kernels whose pods are listed (terminating ones included)."""
    return {pod["metadata"]["annotations"][keys.JUPYTER_KERNEL_ANNOTATION] for pod in kernel_pods(federation)}


async def kernel_target(hub, kernel_id: str, state: str | None = None):
    status, body = await server_api(hub, "alice", "GET", "/gpuburst/culling")
    targets = ((body or {}).get("culling") or {}).get("targets") or []
    found = next((t for t in targets if t["kernel_id"] == kernel_id), None)
    return found if found and (state is None or found["state"] == state) else None


async def test_idle_gpu_kernel_is_warned_then_stopped_and_a_computing_one_is_kept(federation, start_hub):
    hub = await start_hub(KERNEL_CULLING_HUB)
    status, body = await hub.spawn("alice", {"profile": "cpu"})
    assert status in (201, 202), body
    await hub.wait_ready("alice")
    base = f"{hub.url}/user/alice"
    status, idle = await server_api(hub, "alice", "POST", "/kernels", {"name": "gpuburst-gpu-1"})
    assert status == 201, (idle, hub.log_tail())
    status, busy = await server_api(hub, "alice", "POST", "/kernels", {"name": "gpuburst-gpu-1"})
    assert status == 201, busy
    assert (await execute(base, hub.token, idle["id"], "x = 1"))["error"] is None
    # the busy kernel computes for longer than the timeout
    computing = asyncio.ensure_future(
        execute(
            base,
            hub.token,
            busy["id"],
            f"import time\nt = time.time()\nwhile time.time() - t < {TIMEOUT_S + 8}: pass\nprint('done')",
            timeout=120,
        )
    )
    assert len(kernel_pods(federation)) == 2

    warned = await wait_until(lambda: kernel_target(hub, idle["id"], "warn"), TIMEOUT_S + 15, "the idle kernel's warning", interval=0.2)
    assert warned["keepable"] and "GPU kernel" in warned["reason"] and warned["policy"]["timeout_s"] == TIMEOUT_S

    # the stop: its pod goes, the server shuts the kernel down and keeps the hub's sentence
    async def stopped():
        status, body = await server_api(hub, "alice", "GET", "/gpuburst/culling")
        return [s for s in body.get("stopped", []) if s["kernel_id"] == idle["id"]]

    (note,) = await wait_until(stopped, 20, "the idle kernel stopped", interval=0.2)
    assert "This GPU kernel was stopped because its GPU was idle" in note["reason"] and "Restart the kernel" in note["reason"]
    await wait_until(lambda: _kernel_gone(hub, idle["id"]), 20, "the kernel shut down in the server", interval=0.2)
    # the pod's deletion is graceful: a real API server lists it, terminating, until its kubelet
    # has stopped it (on the emulator it was gone by the time the server was told; on the real
    # control plane with four tests at a time it was still listed then)
    await wait_until(lambda: kernels_with_pods(federation) == {busy["id"]}, 30, "the idle kernel's pod gone", interval=0.2)
    assert "GPU culling: stopping alice's GPU kernel" in hub.log()

    out = await computing
    assert out["stdout"].endswith("done\n") and out["error"] is None, out
    assert await kernel_target(hub, busy["id"]) is not None
    # Nothing restarted the stopped kernel on its own; a student's new kernel starts as before.
    # The kernel that computed is idle from its last cell on, and the culler stops it 10 s later:
    # on the real control plane, beside the other tiers, it did while the new kernel started
    # (13 s), so it is not counted here.
    status, again = await server_api(hub, "alice", "POST", "/kernels", {"name": "gpuburst-gpu-1"})
    assert status == 201, again
    assert (await execute(base, hub.token, again["id"], "print(2)"))["stdout"].endswith("2\n")
    assert again["id"] in kernels_with_pods(federation) and idle["id"] not in kernels_with_pods(federation)


async def _kernel_gone(hub, kernel_id: str) -> bool:
    status, kernels = await server_api(hub, "alice", "GET", "/kernels")
    return status == 200 and kernel_id not in [k["id"] for k in kernels]
