"""GPU idle culling with a real JupyterHub, KubeSpawner and jupyter_server against the local
federation: an idle GPU server is warned, kept once, warned again and stopped, and its spawn page
says why; a server whose kernel computes is never stopped; reports are checked."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pytest
from helpers.user_server import server_api

from jupyter_gpuburst.bench.cells import execute
from jupyter_gpuburst.sim.testing import wait_until

pytestmark = pytest.mark.integration

TIMEOUT_S = 10
WARNING_S = 6
PERIOD_S = 1
# bob's cell computes until the test writes this file next to it (through the server's contents
# API): a fixed length lost the race with alice's start, warnings and stop on a loaded machine
RELEASE_FILE = "release-bob"
# Bob's server, on a profile of its own, may sit idle longer than alice's: his GPU is idle from
# his server's start until his kernel has started and runs the cell (15 s beside two busy loops
# on a slow 2-core machine, where 10 s stopped him first). The test runs on until an idle bob
# would have been stopped: that his computing kernel kept him is still what it shows.
BOB_PROFILE = "gpu1-local"
BOB_TIMEOUT_S = 30
# the cell's own bound, so that a test that failed before releasing it does not leave it running
COMPUTE_LIMIT_S = 300

CULLING_HUB = f"""
c.KubeSpawner.environment = {{"JUPYTER_GPUBURST_BACKEND": "simulated"}}
c.GPUCullingSettings.enabled = True
c.GPUCullingSettings.period_seconds = {PERIOD_S}
c.GPUCullingSettings.timeout_seconds = {TIMEOUT_S}
c.GPUCullingSettings.warning_seconds = {WARNING_S}
c.GPUCullingSettings.keep_limit = 1
c.GPUCullingSettings.server_profiles = {{"cpu": {{"enabled": False}}, "{BOB_PROFILE}": {{"timeout_seconds": {BOB_TIMEOUT_S}}}}}
from jupyter_gpuburst.hub import install
install(c)
"""


async def activity_api(hub, token: str, body, path: str = ""):
    async with aiohttp.ClientSession() as http:
        url = f"{hub.url}/services/gpuburst/api/activity{path}"
        async with http.post(url, data=json.dumps(body), headers={"Authorization": f"token {token}"}) as response:
            text = await response.text()
            return response.status, (json.loads(text) if text.startswith("{") else text)


async def server_target(hub, user: str) -> dict | None:
    status, state = await server_api(hub, user, "GET", "/gpuburst/culling")
    if status != 200 or not (state or {}).get("culling"):
        return None
    return next((t for t in state["culling"]["targets"] if t["kind"] == "server"), None)


async def running(hub, user: str) -> bool:
    """Ready, or still stopping: only a server that is gone counts as stopped."""
    status, model = await hub.api("GET", f"/users/{user}")
    return status == 200 and "" in (model.get("servers") or {})


async def test_idle_gpu_server_is_warned_kept_once_then_stopped_and_the_spawn_page_says_why(federation, start_hub):
    hub = await start_hub(CULLING_HUB)
    # bob works first: a cell that runs until after alice's server is stopped, typed and run
    # at once; alice's idle time starts only when her server does, so a slow start of bob's
    # cannot eat into it
    status, body = await hub.spawn("bob", {"profile": BOB_PROFILE})
    assert status in (201, 202), body
    await hub.wait_ready("bob")
    # path "": the kernel starts in the server's root, where the contents API writes
    status, kernel = await server_api(hub, "bob", "POST", "/kernels", {"name": "python3", "path": ""})
    assert status == 201, kernel
    cell = (
        f"import os, time\nlimit = time.monotonic() + {COMPUTE_LIMIT_S}\n"
        f"while not os.path.exists({RELEASE_FILE!r}) and time.monotonic() < limit:\n    time.sleep(0.2)\n"
        "print('done')"
    )
    computing = asyncio.ensure_future(execute(f"{hub.url}/user/bob", hub.token, kernel["id"], cell, timeout=COMPUTE_LIMIT_S + 30))
    await wait_until(lambda: _busy(hub, "bob", kernel["id"], computing), BOB_TIMEOUT_S, "bob's cell running", interval=0.2)
    computing_since = time.monotonic()
    status, body = await hub.spawn("alice", {"profile": "gpu1"})
    assert status in (201, 202), body
    await hub.wait_ready("alice")

    # alice's GPU sits idle: the panel's warning comes before the stop, with a Keep
    warned = await wait_until(lambda: _state(hub, "alice", "warn"), TIMEOUT_S + 10, "alice's warning", interval=0.2)
    assert warned["keepable"] and warned["keeps_left"] == 1 and 0 < warned["stops_in_s"] <= WARNING_S
    assert warned["basis"] == "utilization" and "idle" in warned["reason"]
    status, kept = await server_api(hub, "alice", "POST", "/gpuburst/culling/keep", {"target": "server"})
    assert status == 200, kept
    assert (await server_target(hub, "alice"))["state"] == "active"
    # the second warning offers no Keep: one was allowed
    again = await wait_until(lambda: _state(hub, "alice", "warn"), TIMEOUT_S + 10, "alice's second warning", interval=0.2)
    assert not again["keepable"] and again["keeps_left"] == 0
    status, refused = await server_api(hub, "alice", "POST", "/gpuburst/culling/keep", {"target": "server"})
    assert status == 409 and "1 times" in refused["message"], refused

    await wait_until(lambda: _not(running(hub, "alice")), WARNING_S + 3 * PERIOD_S + 60, "alice's server stopped", interval=0.2)
    # the stop is decided when the warning said, within one period (plus the report's own), by
    # the hub's clock: its log's times, apart from the pod's removal after it (the kubelet's,
    # as fast as the machine lets it) and from how late a loaded machine lets this test look
    warnings = hub.logged_at("GPU culling: warning alice:")
    (stopped,) = hub.logged_at("GPU culling: stopping alice's server")
    assert len(warnings) == 2, hub.log_tail()
    # never before the time the warning said (read after it was logged: that much or more
    # after it; 0.05 s for the log's milliseconds), and at most two periods after
    assert again["stops_in_s"] - 0.05 <= stopped - warnings[-1] <= WARNING_S + 2 * PERIOD_S, hub.log_tail()
    page = await hub.spawn_page("alice")
    assert 'id="gpuburst-stopped"' in page and "its GPU was idle for" in page
    assert not computing.done(), await computing

    # bob's kernel computed through it all, for longer than an idle bob would have been kept
    await asyncio.sleep(max(0.0, computing_since + BOB_TIMEOUT_S + 2 * PERIOD_S - time.monotonic()))
    assert (await server_target(hub, "bob"))["state"] == "active"
    assert not computing.done(), await computing
    # his server still runs, the cell finishes when told
    status, written = await server_api(hub, "bob", "PUT", f"/contents/{RELEASE_FILE}", {"type": "file", "format": "text", "content": ""})
    assert status in (200, 201), written
    out = await computing
    assert out["stdout"] == "done\n", out
    assert await running(hub, "bob")
    assert "stopping bob's server" not in hub.log()


async def _state(hub, user: str, state: str):
    target = await server_target(hub, user)
    return target if target and target["state"] == state else None


async def _busy(hub, user: str, kernel_id: str, computing: asyncio.Future) -> bool:
    if computing.done():  # the cell's connection failed: say why now, not at the timeout
        await computing
    status, model = await server_api(hub, user, "GET", f"/kernels/{kernel_id}")
    return status == 200 and model["execution_state"] == "busy"


async def _not(awaitable) -> bool:
    return not await awaitable


async def test_reports_need_the_owners_activity_scope_and_cannot_speak_for_others(federation, start_hub):
    hub = await start_hub(CULLING_HUB)
    status, body = await hub.spawn("alice", {"profile": "gpu1"})
    assert status in (201, 202), body
    await hub.wait_ready("alice")
    await hub.create_user("mallory")

    def report(seq: int, **extra):
        return {"server_name": "", "boot": "test", "seq": seq, "gpu_idle_s": 0, **extra}

    # a token without users:activity is refused
    status, data = await hub.api("POST", "/users/alice/tokens", {"scopes": ["read:users:name!user"], "note": "no activity"})
    assert status == 201, data
    status, refused = await activity_api(hub, data["token"], report(1))
    assert status == 403 and "users:activity!user=alice" in refused["message"], refused
    # another user's token speaks only for that user, whose server does not run
    status, data = await hub.api("POST", "/users/mallory/tokens", {"note": "mallory"})
    status, refused = await activity_api(hub, data["token"], report(1))
    assert status == 409 and "mallory" in refused["message"], refused
    # alice's own token: a forged kernel of someone else is ignored, a replay refused
    status, data = await hub.api("POST", "/users/alice/tokens", {"note": "alice"})
    token = data["token"]
    status, reply = await activity_api(hub, token, report(10, kernels={"0123abcd": {"idle_s": 0, "kernel_id": "x"}}))
    assert status == 200 and reply["ignored"] == ["0123abcd"], reply
    status, refused = await activity_api(hub, token, report(10))
    assert status == 409 and "replayed" in refused["message"]
    status, refused = await activity_api(hub, token, report(11, gpu_idle_s=-1))
    assert status == 400
    assert "reported kernels that are not its own" in hub.log()
    assert token not in hub.log()
