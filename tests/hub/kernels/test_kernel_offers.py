"""The admin says which server profiles offer GPU kernels: a server whose profile offers none has
no GPU kernels (no kernelspecs, so no launcher section), and its token cannot start one, for
itself or by naming another of its user's servers; a server offered some has only those."""

from __future__ import annotations

import aiohttp
import pytest
from helpers.kernels import KERNEL_HUB

pytestmark = pytest.mark.integration

OFFERS = """
c.JupyterHub.allow_named_servers = True
c.GPUKernelSettings.server_profiles = {"gpu1": ["gpu-1"]}
"""
KERNEL_API = "/services/gpuburst/api/kernels"


def server_token(federation, server_name: str) -> str:
    """The token the hub gave the server (its code can read it from its environment)."""
    items, _ = federation.origin.store.list("pods", "default")
    for pod in items:
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env") or []}
        if env.get("JUPYTERHUB_SERVER_NAME", "") == server_name and "JUPYTERHUB_API_TOKEN" in env:
            return env["JUPYTERHUB_API_TOKEN"]
    raise AssertionError(f"no server pod for {server_name!r}")


async def server_api(hub, user: str, method: str, path: str) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as http:
        async with http.request(method, f"{hub.url}/user/{user}/api{path}", headers={"Authorization": f"token {hub.token}"}) as response:
            return response.status, await response.json(content_type=None)


async def kernel_post(hub, token: str, body: dict) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{hub.url}{KERNEL_API}", json=body, headers={"Authorization": f"token {token}"}) as response:
            return response.status, await response.json(content_type=None)


async def test_only_the_server_profiles_the_admin_names_offer_gpu_kernels(federation, start_hub):
    hub = await start_hub(KERNEL_HUB + OFFERS)
    status, body = await hub.spawn("alice", {"profile": "cpu"})
    assert status in (201, 202), body
    status, body = await hub.spawn("alice", {"profile": "gpu1"}, server="g")
    assert status in (201, 202), body
    await hub.wait_ready("alice")
    await hub.wait_ready("alice", server="g")

    # the CPU-only server: no GPU kernelspecs, nothing for the launcher
    status, specs = await server_api(hub, "alice", "GET", "/kernelspecs")
    assert status == 200 and not [n for n in specs["kernelspecs"] if n.startswith("gpuburst-")], specs
    status, offered = await server_api(hub, "alice", "GET", "/gpuburst/kernel-profiles")
    assert status == 200 and offered["profiles"] == [], offered
    assert offered["queues"] is False, offered  # refused with none free, by default
    # its token cannot start one, for itself or in the name of the server that may
    cpu_token = server_token(federation, "")
    key = {"key": "f" * 32, "kernel_id": "k1"}
    status, refused = await kernel_post(hub, cpu_token, {"profile": "gpu-1", "server_name": "", **key})
    assert status == 403 and "offers no such GPU kernel" in refused["message"], refused
    status, refused = await kernel_post(hub, cpu_token, {"profile": "gpu-1", "server_name": "g", **key})
    assert status == 403 and "that server only" in refused["message"], refused

    # the GPU server offers the one GPU kernel the admin named, and no other
    g_token = server_token(federation, "g")
    status, refused = await kernel_post(hub, g_token, {"profile": "gpu-2", "server_name": "g", **key})
    assert status == 403 and "offers no such GPU kernel" in refused["message"], refused
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{hub.url}/user/alice/g/api/kernelspecs", headers={"Authorization": f"token {hub.token}"}) as response:
            specs = await response.json()
    assert sorted(n for n in specs["kernelspecs"] if n.startswith("gpuburst-")) == ["gpuburst-gpu-1"], specs
