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
    server.authorizer_sync_s = 1.0
    server.readyz_lag_s = 1.0
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
        await asyncio.sleep(1.1)
        # allowed again, and only then, a moment later, ready: never ready while still refusing
        assert (await http.get(PODS, headers=AS_HUB)).status_code == 200
        assert (await http.get("/readyz")).status_code == 500
        await asyncio.sleep(server.readyz_lag_s)
        assert (await http.get("/readyz")).status_code == 200


async def test_the_first_start_has_no_window(server):
    # a fresh server answers before anyone's first request could: no window to wait out
    async with httpx.AsyncClient(base_url=server.url) as http:
        assert (await http.get(PODS, headers=AS_HUB)).status_code == 200
        assert (await http.get("/readyz")).status_code == 200
