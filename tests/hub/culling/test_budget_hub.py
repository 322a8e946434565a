"""GPU-hour budgets with a real JupyterHub, KubeSpawner and jupyter_server against the local
federation, idle culling off: a GPU server whose student uses up their hours is warned in the
Lab's culling state, then stopped, and its spawn page says why; an admin's grant before the stop
cancels it; an admin over "their" budget is never warned. A GPU kernel over budget is warned and
stopped the same way, and its notebook's server hears why; its CPU server runs on."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest
from helpers.user_server import server_api

from jupyter_gpuburst.sim.testing import wait_until

pytestmark = pytest.mark.integration

GRACE_S = 15
PERIOD_S = 1
# each student gets a few GPU-seconds of hours by an admin's grant before starting
START_HOURS = 0.01  # 36 GPU-seconds: the budget holds from the pod's start, so they must outlast a loaded start

# the budgets come after install(c), as hub_config/accounting.py loaded at a config's end does:
# the hub reads them when it starts, wherever they stand
BUDGET_HUB = f"""
from jupyter_gpuburst.hub import install
install(c)
c.KubeSpawner.environment = {{"JUPYTER_GPUBURST_BACKEND": "simulated"}}
c.Authenticator.admin_users = {{"root"}}
c.GPUCullingSettings.period_seconds = {PERIOD_S}  # idle culling itself stays off
c.GPUAccountingSettings.user_budgets = {{"*": 20.0, "alice": 0.0, "bob": 0.0, "root": 0.0}}
c.GPUAccountingSettings.budget_grace_seconds = {GRACE_S}
"""


async def grant(hub, user: str, hours: float) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{hub.url}/services/gpuburst/api/budgets/grants",
            json={"user": user, "hours": hours},
            headers={"Authorization": f"token {hub.token}"},
        ) as response:
            assert response.status == 200, await response.text()


async def server_target(hub, user: str) -> dict | None:
    status, state = await server_api(hub, user, "GET", "/gpuburst/culling")
    if status != 200 or not (state or {}).get("culling"):
        return None
    return next((t for t in state["culling"]["targets"] if t["kind"] == "server"), None)


async def budget_warning(hub, user: str) -> dict | None:
    target = await server_target(hub, user)
    return target if target and target["state"] == "warn" and target["cause"] == "budget" else None


async def stopped(hub, user: str) -> bool:
    status, model = await hub.api("GET", f"/users/{user}")
    return status == 200 and "" not in (model.get("servers") or {})


async def test_a_server_over_budget_is_warned_then_stopped_unless_an_admin_grants_more(federation, start_hub):
    hub = await start_hub(BUDGET_HUB)
    # the admin first: the students' few seconds must not run out while his server starts
    status, body = await hub.spawn("root", {"profile": "gpu1"})
    assert status in (201, 202), body
    await hub.wait_ready("root", timeout=90)
    for user in ("alice", "bob"):
        await hub.create_user(user)
        await grant(hub, user, START_HOURS)
        status, body = await hub.spawn(user, {"profile": "gpu1"})
        assert status in (201, 202), body
    await asyncio.gather(*(hub.wait_ready(user, timeout=90) for user in ("alice", "bob")))

    # their few GPU-seconds run out while the servers run: the Lab's culling state warns, no Keep
    warned = await wait_until(lambda: budget_warning(hub, "alice"), 60, "alice's budget warning", interval=0.2)
    assert not warned["keepable"] and 0 < warned["stops_in_s"] <= GRACE_S
    assert warned["reason"].startswith("your GPU-hour budget is used up (0 of 0 GPU-hours left this week, resets ")
    await wait_until(lambda: budget_warning(hub, "bob"), 60, "bob's budget warning", interval=0.2)
    bob_warned_at = time.monotonic()

    # an admin grants bob an hour before his stop: the warning goes, and he keeps his server
    await grant(hub, "bob", 1.0)
    await wait_until(lambda: _no_warning(hub, "bob"), 5 * PERIOD_S + 5, "bob's warning withdrawn", interval=0.2)

    # alice's stop lands after the grace, and her spawn page says why
    await wait_until(lambda: stopped(hub, "alice"), GRACE_S + 3 * PERIOD_S + 10, "alice's server stopped", interval=0.2)
    assert "GPU culling: stopping alice's server" in hub.log()
    page = await hub.spawn_page("alice")
    assert 'id="gpuburst-stopped"' in page
    assert "Your server was stopped because your GPU-hour budget is used up" in page
    assert "Ask the hub&#39;s admins for more hours." in page or "Ask the hub's admins for more hours." in page

    # bob's grace is past (waited out, not polled: it is that nothing happens): still running;
    # the admin was never warned
    await asyncio.sleep(max(0.0, bob_warned_at + GRACE_S + 3 * PERIOD_S - time.monotonic()))
    assert not await stopped(hub, "bob")
    assert (await server_target(hub, "root"))["cause"] != "budget"
    assert not await stopped(hub, "root")
    assert "stopping bob's server" not in hub.log() and "stopping root's server" not in hub.log()


async def _no_warning(hub, user: str) -> bool:
    target = await server_target(hub, user)
    return target is not None and target["state"] != "warn"


KERNEL_BUDGET_HUB = f"""
c.GPUCullingSettings.period_seconds = {PERIOD_S}  # idle culling itself stays off
c.GPUAccountingSettings.user_budgets = {{"*": 20.0, "bob": 0.0}}
c.GPUAccountingSettings.budget_grace_seconds = {GRACE_S}
from jupyter_gpuburst.hub import install
install(c)
c.JupyterHub.load_roles.append({{"name": "gpu-kernels", "scopes": ["custom:gpuburst:kernels", "access:services!service=gpuburst"], "users": ["bob"]}})
c.GPUKernelSettings.extra_env = {{"JUPYTER_GPUBURST_BACKEND": "simulated"}}
"""


async def test_a_gpu_kernel_over_budget_is_warned_then_stopped_and_its_notebook_hears_why(federation, start_hub):
    hub = await start_hub(KERNEL_BUDGET_HUB)
    status, body = await hub.spawn("bob", {"profile": "cpu"})
    assert status in (201, 202), body
    await hub.wait_ready("bob")
    await grant(hub, "bob", START_HOURS)
    status, kernel = await server_api(hub, "bob", "POST", "/kernels", {"name": "gpuburst-gpu-1"})
    assert status == 201, (kernel, hub.log_tail())

    async def kernel_target():
        status, state = await server_api(hub, "bob", "GET", "/gpuburst/culling")
        targets = ((state or {}).get("culling") or {}).get("targets") or []
        found = next((t for t in targets if t["kernel_id"] == kernel["id"]), None)
        return found if found and found["state"] == "warn" and found["cause"] == "budget" else None

    warned = await wait_until(kernel_target, 60, "bob's GPU kernel's budget warning", interval=0.2)
    assert not warned["keepable"] and 0 < warned["stops_in_s"] <= GRACE_S
    # his CPU server holds no GPU-hours: it is not warned
    assert (await server_target(hub, "bob"))["state"] != "warn"

    async def kernel_stops():
        status, state = await server_api(hub, "bob", "GET", "/gpuburst/culling")
        return [s for s in (state or {}).get("stopped", []) if s["kernel_id"] == kernel["id"]]

    (note,) = await wait_until(kernel_stops, GRACE_S + 3 * PERIOD_S + 10, "bob's GPU kernel stopped", interval=0.2)
    assert note["reason"].startswith("This GPU kernel was stopped because your GPU-hour budget is used up (0 of 0 GPU-hours left this week")
    assert note["reason"].endswith("Ask the hub's admins for more hours.")
    assert "GPU culling: stopping bob's GPU kernel" in hub.log()
    # his server runs on
    assert not await stopped(hub, "bob")
