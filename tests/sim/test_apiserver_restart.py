"""An emulated API server started again serves before its authorizer has the roles, as
kube-apiserver does: for a moment what RBAC allows is 403 and /readyz is not ready."""

from __future__ import annotations

import asyncio

import httpx
import pytest

AS_HUB = {"Impersonate-User": "system:serviceaccount:jhub:hub"}
PODS = "/api/v1/namespaces/jhub/pods"


@pytest.fixture
def server(hub_rbac_apiserver):
    return hub_rbac_apiserver


async def test_a_restarted_server_refuses_what_rbac_allows_until_its_authorizer_is_ready(server):
    # Windows far longer than a loaded machine's slowest request, ended by the test itself: with
    # 1 s windows the requests meant to land inside one landed after it under a full suite's load
    server.authorizer_sync_s = 60.0
    server.readyz_lag_s = 60.0
    async with httpx.AsyncClient(base_url=server.url) as http:
        # first started: ready, and the hub's grant holds
        assert (await http.get("/readyz")).status_code == 200
        assert (await http.get(PODS, headers=AS_HUB)).status_code == 200
        await server.stop()
        await server.start()
        refused = await http.get(PODS, headers=AS_HUB)
        assert refused.status_code == 403
        assert refused.json()["reason"] == "Forbidden"
        assert 'User "system:serviceaccount:jhub:hub" cannot list resource "pods"' in refused.json()["message"]
        readyz = await http.get("/readyz")
        assert readyz.status_code == 500
        assert "[-]poststarthook/rbac/bootstrap-roles failed" in readyz.text
        # the admin (system:masters) is never asked about, so never refused
        assert (await http.get(PODS)).status_code == 200
        server.sync_authorizer()
        # allowed again, and only then, a moment later, ready: never ready while still refusing
        assert (await http.get(PODS, headers=AS_HUB)).status_code == 200
        assert (await http.get("/readyz")).status_code == 500
        server.readyz_lag_s = 0.0
        server.sync_authorizer()
        assert (await http.get("/readyz")).status_code == 200


async def test_the_window_after_a_restart_ends_by_itself_and_readiness_follows_it(server):
    server.authorizer_sync_s = 0.5
    server.readyz_lag_s = 0.5
    loop = asyncio.get_running_loop()
    async with httpx.AsyncClient(base_url=server.url) as http:
        await server.stop()
        await server.start()
        deadline = loop.time() + 30  # the window's end does come; how soon depends on the load
        seen = []
        while True:
            # readiness first: once ready, the hub's next request must be allowed
            ready = (await http.get("/readyz")).status_code
            allowed = (await http.get(PODS, headers=AS_HUB)).status_code
            seen.append((allowed, ready))
            assert (allowed, ready) in {(403, 500), (200, 500), (200, 200)}, seen
            if ready == 200:
                break
            assert loop.time() < deadline, f"still {seen[-1]} 30 s after the restart"
            await asyncio.sleep(0.05)


async def test_the_first_start_has_no_window(server):
    # a fresh server answers before anyone's first request could: no window to wait out
    async with httpx.AsyncClient(base_url=server.url) as http:
        assert (await http.get(PODS, headers=AS_HUB)).status_code == 200
        assert (await http.get("/readyz")).status_code == 200
