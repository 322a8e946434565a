"""Someone given one of alice's servers (JupyterHub's sharing) can read that server's own token,
as any code in the server can: with it they reach that server's GPU kernels only, never the ones
of her other servers, nor keep or report those; once the server stops, its token gets nothing
even while the hub's token cache still accepts it. Real JupyterHub on the local federation."""

from __future__ import annotations

import json

import aiohttp
import pytest
from helpers.kernels import KERNEL_HUB

from jupyter_gpuburst.core import keys
from jupyter_gpuburst.sim.testing import wait_until

pytestmark = pytest.mark.integration

SHARING_HUB = KERNEL_HUB + "\nc.JupyterHub.allow_named_servers = True\n"


def server_token(federation, server: str) -> str:
    """The server's own token, as code running in it reads it ($JUPYTERHUB_API_TOKEN)."""
    pods, _ = federation.origin.store.list("pods", "default")
    for pod in pods:
        env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0].get("env") or []}
        if env.get("JUPYTERHUB_USER") == "alice" and env.get("JUPYTERHUB_SERVER_NAME") == server:
            return env["JUPYTERHUB_API_TOKEN"]
    raise AssertionError(f"no pod of alice's server {server!r}")


async def call(hub, token: str, method: str, path: str, body: dict | None = None) -> tuple[int, dict | None]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        async with http.request(
            method, f"{hub.url}/services/gpuburst/{path}", json=body, headers={"Authorization": f"token {token}"}
        ) as response:
            text = await response.text()
            return response.status, (json.loads(text) if text.startswith("{") else None)


async def test_a_shared_servers_token_cannot_touch_the_owners_other_servers_kernels(federation, start_hub):
    hub = await start_hub(SHARING_HUB)
    await hub.create_user("bob")
    for server in ("one", "two"):
        status, body = await hub.spawn("alice", {"profile": "cpu"}, server=server)
        assert status in (201, 202), body
    for server in ("one", "two"):
        await hub.wait_ready("alice", server)
    # alice's server "one" is shared with bob: he reaches it, and so can read its token
    status, share = await hub.api("POST", "/shares/alice/one", {"user": "bob"})
    assert status in (200, 201), share
    status, made = await hub.api("POST", "/users/bob/tokens", {"scopes": ["access:servers!server=alice/one"]})
    assert status == 201, made
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{hub.url}/user/alice/one/api/status", headers={"Authorization": f"token {made['token']}"}) as response:
            assert response.status == 200
    one, two = server_token(federation, "one"), server_token(federation, "two")

    # a GPU kernel of server "two"
    status, kernel = await call(
        hub, two, "POST", "api/kernels", {"profile": "gpu-1", "key": "k" * 32, "server_name": "two", "kernel_id": "k2"}
    )
    assert status == 202, (kernel, hub.log_tail())
    status, listing = await call(hub, two, "GET", "api/kernels")
    assert status == 200 and [k["id"] for k in listing["kernels"]] == [kernel["id"]], (listing, hub.log_tail())

    # server "one"'s token: none of it
    status, listing = await call(hub, one, "GET", "api/kernels")
    assert status == 200 and listing["kernels"] == []
    for method in ("GET", "DELETE"):
        status, _ = await call(hub, one, method, f"api/kernels/{kernel['id']}")
        assert status == 404, method
    status, refused = await call(hub, one, "POST", "api/kernels", {"profile": "gpu-1", "key": "k" * 32, "server_name": "two"})
    assert status == 403, refused
    status, refused = await call(hub, one, "POST", keys.ACTIVITY_API_PATH + "/keep", {"server_name": "two", "target": kernel["id"]})
    assert status == 403 and "that server only" in refused["message"], refused
    status, refused = await call(hub, one, "POST", keys.ACTIVITY_API_PATH, {"server_name": "two", "kernels": {}})
    assert status == 403 and "that server only" in refused["message"], refused
    # the kernel is untouched
    status, listing = await call(hub, two, "GET", "api/kernels")
    assert status == 200 and [k["id"] for k in listing["kernels"]] == [kernel["id"]], (listing, hub.log_tail())

    # server "one" stops: the hub deletes its token, and it gets nothing even while cached
    status, _ = await hub.api("DELETE", "/users/alice/servers/one")
    assert status in (202, 204)

    async def one_stopped() -> bool:
        status, user = await hub.api("GET", "/users/alice")
        return status == 200 and "one" not in user["servers"]

    await wait_until(one_stopped, timeout=60, what="alice's server one stopped")
    status, refused = await call(hub, one, "GET", "api/kernels")
    assert status == 403 and "no longer valid" in refused["message"], refused
    status, _ = await call(hub, one, "DELETE", f"api/kernels/{kernel['id']}")
    assert status == 403
    status, listing = await call(hub, two, "GET", "api/kernels")
    assert status == 200 and [k["id"] for k in listing["kernels"]] == [kernel["id"]], (listing, hub.log_tail())
