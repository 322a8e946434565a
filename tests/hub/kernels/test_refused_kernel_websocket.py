"""A refused GPU kernel's websocket, through the hub's proxy as a browser opens it: the handshake
fails with 500 (JupyterLab reads why from the kernel's model) and configurable-http-proxy logs no
``Uncaught Exception: write EPIPE``. It did after each refusal: the server answered the handshake
with an error page, the browser dropped the connection on reading the status line, and the
proxy wrote the rest of the answer to the closed socket."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from helpers.kernels import KERNEL_HUB

pytestmark = pytest.mark.integration

# more GPUs than the origin has (2), and only there: the hub refuses it at once, nothing queues
REFUSED = """
c.GPUKernelSettings.profiles = [
    {"slug": "gpu-3", "display_name": "Python 3 (3 GPUs)", "count": 3, "allowed_sites": ["origin"]},
]
"""
# the proxy's write after the browser has gone is a race each handshake may lose or win: enough
# handshakes that an answer with something after its head shows it
HANDSHAKES = 40


async def server_api(hub, method: str, path: str, body: dict | None = None) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as http:
        url = f"{hub.url}/user/alice/api{path}"
        async with http.request(method, url, json=body, headers={"Authorization": f"token {hub.token}"}) as response:
            return response.status, await response.json(content_type=None)


async def handshake(hub, kernel_id: str) -> int:
    """The kernel's websocket as JupyterLab opens it, through the proxy; the handshake's status.
    The connection is dropped once the status is read, as a browser does on a failed handshake."""
    url = f"{hub.url}/user/alice/api/kernels/{kernel_id}/channels?session_id=s1"
    async with aiohttp.ClientSession() as http:
        try:
            async with http.ws_connect(url, headers={"Authorization": f"token {hub.token}"}):
                return 101
        except aiohttp.WSServerHandshakeError as exc:
            return exc.status


def proxy_errors(log: str) -> list[str]:
    return [line for line in log.splitlines() if "[ConfigProxy]" in line and ("EPIPE" in line or "Uncaught" in line)]


async def test_a_refused_gpu_kernel_s_websocket_fails_without_a_proxy_error(start_hub):
    hub = await start_hub(KERNEL_HUB + REFUSED)
    status, body = await hub.spawn("alice", {"profile": "cpu"})
    assert status in (201, 202), body
    await hub.wait_ready("alice")
    status, kernel = await server_api(hub, "POST", "/kernels", {"name": "gpuburst-gpu-3"})
    assert status == 201 and kernel["execution_state"] == "starting", kernel

    # the handshake fails with the start (the server holds it until the hub has answered)...
    assert await handshake(hub, kernel["id"]) == 500
    # ...and JupyterLab reads why from the kernel's model
    status, model = await server_api(hub, "GET", f"/kernels/{kernel['id']}")
    assert status == 200 and model["execution_state"] == "dead", model
    assert "No GPU kernel: No site can start 3 GPUs now" in " ".join(model["reason"].split()), model
    # JupyterLab tries the dead kernel's websocket again before it gives up: each fails as well
    for _ in range(HANDSHAKES):
        assert await handshake(hub, kernel["id"]) == 500
    # a request through the proxy after the last handshake: what the proxy did with it is logged
    status, _ = await server_api(hub, "GET", f"/kernels/{kernel['id']}")
    assert status == 200
    await asyncio.sleep(0.5)
    assert "[ConfigProxy]" in hub.log(), "the proxy's output is not in the hub's log"
    errors = proxy_errors(hub.log())
    assert not errors, "\n".join(errors)
