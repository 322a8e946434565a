"""A student who disables the jupyter_gpuburst server extension in their own Jupyter config dir
(its report never comes) still meets the hub's limits: with a real JupyterHub, KubeSpawner and
jupyter_server on the local federation, one such GPU server is stopped at its maximum age and
another at its GPU-hour budget, both from the hub's own records."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest

from jupyter_gpuburst.sim.testing import wait_until

pytestmark = pytest.mark.integration

PERIOD_S = 1
WARNING_S = 5
MAX_AGE_S = 60
GRACE_S = 5
START_HOURS = 0.01  # 36 GPU-seconds for bob, granted before his start: they outlast his start

SILENT_HUB = """
c.KubeSpawner.environment = {{"JUPYTER_GPUBURST_BACKEND": "simulated", "JUPYTER_CONFIG_DIR": {config_dir!r}}}
c.GPUCullingSettings.enabled = True
c.GPUCullingSettings.period_seconds = {period}
c.GPUCullingSettings.warning_seconds = {warning}
c.GPUCullingSettings.max_age_seconds = {max_age}
c.GPUCullingSettings.silent_seconds = 3600  # neither is stopped as silent here
c.GPUCullingSettings.exempt_groups = ["staff"]  # bob: no maximum age, so his budget stops him
c.JupyterHub.load_groups = {{"staff": {{"users": ["bob"]}}}}
c.GPUAccountingSettings.user_budgets = {{"*": 20.0, "bob": 0.0}}
c.GPUAccountingSettings.budget_grace_seconds = {grace}
from jupyter_gpuburst.hub import install
install(c)
"""


async def grant(hub, user: str, hours: float) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{hub.url}/services/gpuburst/api/budgets/grants",
            json={"user": user, "hours": hours},
            headers={"Authorization": f"token {hub.token}"},
        ) as response:
            assert response.status == 200, await response.text()


async def served(hub, user: str, path: str) -> int:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{hub.url}/user/{user}{path}", headers={"Authorization": f"token {hub.token}"}) as response:
            return response.status


async def stopped(hub, user: str) -> bool:
    status, model = await hub.api("GET", f"/users/{user}")
    return status == 200 and "" not in (model.get("servers") or {})


async def test_gpu_servers_that_never_report_are_stopped_at_their_maximum_age_and_their_budget(federation, start_hub, tmp_path):
    # the student's own ~/.jupyter: the extension, and so its activity report, is off
    config_dir = tmp_path / "student-jupyter"
    config_dir.mkdir()
    (config_dir / "jupyter_server_config.json").write_text(json.dumps({"ServerApp": {"jpserver_extensions": {"jupyter_gpuburst": False}}}))
    hub = await start_hub(
        SILENT_HUB.format(config_dir=str(config_dir), period=PERIOD_S, warning=WARNING_S, max_age=MAX_AGE_S, grace=GRACE_S)
    )
    began = time.monotonic()
    status, body = await hub.spawn("alice", {"profile": "gpu1"})
    assert status in (201, 202), body
    await grant(hub, "bob", START_HOURS)
    status, body = await hub.spawn("bob", {"profile": "gpu1"})
    assert status in (201, 202), body
    await asyncio.gather(*(hub.wait_ready(user, timeout=90) for user in ("alice", "bob")))
    assert await served(hub, "alice", "/api/status") == 200
    assert await served(hub, "alice", "/api/gpuburst/placement") == 404, "the extension still runs in alice's server"

    # bob's few GPU-seconds run out: warned, then stopped after the grace, though nothing reports
    await wait_until(lambda: stopped(hub, "bob"), MAX_AGE_S + 60, "bob's server stopped at his budget", interval=0.2)
    assert "GPU culling: stopping bob's server '': your GPU-hour budget is used up" in hub.log()

    # alice's server is stopped at its maximum age, counted from its start, never before
    await wait_until(lambda: stopped(hub, "alice"), MAX_AGE_S + 30, "alice's server stopped at its maximum age", interval=0.2)
    assert time.monotonic() - began >= MAX_AGE_S
    log = hub.log_path.read_text()  # the whole log: its start says the culler found alice's server silent
    assert "GPU culling: stopping alice's server '': it reached the maximum age of 1 min" in log
    assert "no GPU activity report for alice's server '' for " in log
    page = await hub.spawn_page("alice")
    assert "Your server was stopped because it reached the maximum age of 1 min" in page
