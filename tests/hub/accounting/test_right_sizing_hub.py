"""Right-sizing through a real JupyterHub, KubeSpawner and jupyter_server on the local federation:
the student's GPU server reports what its GPUs use, the ledger keeps it on the session, admins
read the peaks, and the launcher (through the server) and the spawn form say what would do."""

from __future__ import annotations

import html

import aiohttp
import pytest
from helpers.kernels import KERNEL_HUB, KERNEL_SCOPES
from helpers.usage_hub import SLICE_KERNELS, earlier_sessions
from helpers.user_server import server_api

from jupyter_gpuburst.sim.testing import wait_until

pytestmark = pytest.mark.integration

SENTENCE = 'Your last 5 GPU sessions peaked at 5 GiB of GPU memory: a MIG 1g.10gb slice would do ("MIG 1g.10gb").'


def hub_config(ledger: str) -> str:
    return (
        KERNEL_HUB
        + f"""
c.KubeSpawner.environment = {{"JUPYTER_GPUBURST_BACKEND": "simulated"}}
# servers report their GPUs' activity (and use) every second; nothing is culled
c.GPUCullingSettings.enabled = False
c.GPUCullingSettings.period_seconds = 1
c.GPUAccountingSettings.ledger_path = {ledger!r}
"""
        + SLICE_KERNELS
    )


async def usage_of(hub, user: str) -> dict | None:
    async with aiohttp.ClientSession() as http:
        url = f"{hub.url}/services/gpuburst/api/usage?period=week&by=user"
        async with http.get(url, headers={"Authorization": f"token {hub.token}"}) as response:
            assert response.status == 200, await response.text()
            rows = (await response.json())["rows"]
    return next((r for r in rows if r["user"] == user), None)


async def test_a_gpu_servers_use_reaches_the_ledger_and_the_launcher_and_form_suggest_a_smaller_profile(federation, start_hub, tmp_path):
    ledger = tmp_path / "usage.sqlite"
    earlier_sessions(ledger, "alice", 4)
    hub = await start_hub(hub_config(str(ledger)))
    status, body = await hub.spawn("alice", {"profile": "gpu2"})
    assert status in (201, 202), body
    await hub.wait_ready("alice")

    async def measured() -> dict | None:
        row = await usage_of(hub, "alice")
        # utilization is sampled by the running server only: its report has reached the ledger
        return row if row and row["mean_gpu_utilization"] is not None else None

    row = await wait_until(measured, 30, "alice's server's GPU use in the ledger", interval=0.5)
    assert row["peak_gpu_memory_gib"] is not None and 0 <= row["mean_gpu_utilization"] <= 1

    # four earlier sessions and this one: five, peaking at 5 GiB of 80; the smallest kernel that
    # holds 5 GiB and a margin is the 1g.10gb slice, said by the hub and passed on by the server
    status, offered = await server_api(hub, "alice", "GET", "/gpuburst/kernel-profiles")
    assert status == 200, offered
    assert offered["suggestion"] == SENTENCE
    # another student with no measured sessions hears nothing
    async with aiohttp.ClientSession() as http:
        await hub.create_user("bob")
        status, token = await hub.api("POST", "/users/bob/tokens", {"scopes": KERNEL_SCOPES})
        assert status == 201, token
        async with http.get(f"{hub.url}/services/gpuburst/api/kernels", headers={"Authorization": f"token {token['token']}"}) as response:
            assert response.status == 200, await response.text()
            assert (await response.json())["suggestion"] == ""

    # the spawn form says it too once the server is stopped, above the profiles: from the server
    # profiles, which have no MIG slice, one GPU
    status, _ = await hub.api("DELETE", "/users/alice/server")
    assert status in (202, 204)
    await wait_until(lambda: _stopped(hub, "alice"), 60, "alice's server stopped", interval=0.5)
    page = await hub.spawn_page("alice")
    form_sentence = 'Your last 5 GPU sessions peaked at 5 GiB of GPU memory: one GPU would do ("One GPU").'
    assert f'<p class="gpuburst-right-size" id="gpuburst-right-size">{html.escape(form_sentence)}</p>' in page
    assert page.index('id="gpuburst-right-size"') < page.index('name="profile"')


async def _stopped(hub, user: str) -> bool:
    status, model = await hub.api("GET", f"/users/{user}")
    return status == 200 and "" not in (model.get("servers") or {})


async def test_a_gpu_kernels_use_reaches_the_ledger_through_its_server(federation, start_hub, tmp_path):
    hub = await start_hub(hub_config(str(tmp_path / "usage.sqlite")))
    status, body = await hub.spawn("alice", {"profile": "cpu"})
    assert status in (201, 202), body
    await hub.wait_ready("alice")
    status, kernel = await server_api(hub, "alice", "POST", "/kernels", {"name": "gpuburst-gpu-1"}, timeout=120)
    assert status == 201, kernel

    async def kernel_row() -> dict | None:
        async with aiohttp.ClientSession() as http:
            url = f"{hub.url}/services/gpuburst/api/usage?period=week&by=user,mode"
            async with http.get(url, headers={"Authorization": f"token {hub.token}"}) as response:
                rows = (await response.json())["rows"]
        row = next((r for r in rows if r["user"] == "alice" and r["mode"] == "kernel"), None)
        return row if row and row["peak_gpu_memory_gib"] is not None else None

    # the kernel's pod reads its own (simulated) GPU; its server passes the figures on
    row = await wait_until(kernel_row, 90, "alice's GPU kernel's GPU use in the ledger", interval=0.5)
    assert 0 < row["peak_gpu_memory_gib"] < 40 and row["mean_gpu_utilization"] is not None
    status, _ = await server_api(hub, "alice", "DELETE", f"/kernels/{kernel['id']}")
    assert status == 204
