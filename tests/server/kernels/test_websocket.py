"""A pending kernel that could not start fails its websocket's handshake with 500 and no body (the
page jupyter_server wrote there was written by the hub's proxy to the browser's closed socket);
the kernel's model keeps why; a kernel that starts is connected as before; an admin's own
connection class is left in place."""

from __future__ import annotations

import asyncio
import json

import pytest
from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection

from jupyter_gpuburst.server.kernels.websocket import SETTING, BodilessStartFailure


class AdminsConnection(ZMQChannelsWebsocketConnection):
    """An admin's own connection class, set in ServerApp's config."""


async def handshake(port: int, path: str, headers: dict[str, str]) -> tuple[str, dict[str, str], bytes]:
    """A websocket handshake as a browser sends it: the status line, the headers and the body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        lines = [
            f"GET {path} HTTP/1.1",
            f"Host: 127.0.0.1:{port}",
            "Upgrade: websocket",
            "Connection: Upgrade",
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
            "Sec-WebSocket-Version: 13",
            *(f"{name}: {value}" for name, value in headers.items()),
        ]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)).decode()
        status, *fields = head.strip().split("\r\n")
        answer = {name.lower(): value.strip() for name, _, value in (f.partition(":") for f in fields)}
        body = await reader.readexactly(int(answer.get("content-length", "0")))
        return status, answer, body
    finally:
        writer.close()


async def test_a_kernel_that_could_not_start_fails_the_handshake_with_500_and_no_body(
    jp_serverapp, jp_fetch, jp_data_dir, jp_http_port, jp_base_url, jp_auth_header
):
    assert jp_serverapp.web_app.settings[SETTING] is BodilessStartFailure
    assert jp_serverapp.kernel_websocket_connection_class is BodilessStartFailure
    spec = jp_data_dir / "kernels" / "cannot-start"
    spec.mkdir(parents=True)
    spec.joinpath("kernel.json").write_text(
        json.dumps({"argv": ["/nonexistent/kernel", "{connection_file}"], "display_name": "Cannot start", "language": "python"})
    )
    # as in GPU kernel mode: the kernel exists at once, its start goes on behind it
    jp_serverapp.kernel_manager.use_pending_kernels = True
    kernel = json.loads((await jp_fetch("api", "kernels", method="POST", body=json.dumps({"name": "cannot-start"}))).body)

    path = f"{jp_base_url}api/kernels/{kernel['id']}/channels?session_id=s1"
    status, answer, body = await handshake(jp_http_port, path, jp_auth_header)
    assert status.startswith("HTTP/1.1 500 "), status
    assert answer["content-length"] == "0" and body == b"", (answer, body)
    # JupyterLab reads why from the kernel's model
    model = json.loads((await jp_fetch("api", "kernels", kernel["id"])).body)
    assert model["execution_state"] == "dead" and "/nonexistent/kernel" in model["reason"], model


async def test_a_kernel_that_starts_is_connected(jp_serverapp, jp_fetch, jp_ws_fetch):
    kernel = json.loads((await jp_fetch("api", "kernels", method="POST", body=json.dumps({"name": "python3"}))).body)
    try:
        ws = await jp_ws_fetch("api", "kernels", kernel["id"], "channels")
        # the kernel's first status reaches the socket: it is the kernel's, connected
        message = json.loads(await asyncio.wait_for(ws.read_message(), 60))
        assert message["header"]["msg_type"] in ("status", "kernel_info_reply"), message
        ws.close()
    finally:
        await jp_fetch("api", "kernels", kernel["id"], method="DELETE")


@pytest.mark.parametrize("server_extra_config", [{"kernel_websocket_connection_class": AdminsConnection}])
async def test_an_admins_own_connection_class_is_kept(jp_serverapp):
    assert jp_serverapp.web_app.settings[SETTING] is AdminsConnection
    assert jp_serverapp.kernel_websocket_connection_class is AdminsConnection
