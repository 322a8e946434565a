"""A GPU kernel's websocket whose start failed: the handshake is answered with its status alone.

jupyter_server holds a pending kernel's websocket request until the kernel is ready and, when the
start fails (the hub refused it: nothing free, over budget, not offered; or its pod died), answers
that request with an HTTP 500 error page. A browser fails the handshake on the status line and
drops the connection; the hub's proxy (configurable-http-proxy, through http-proxy-3) has sent
the head by then and writes the rest of the answer to the closed socket, logging
``Uncaught Exception: write EPIPE`` after each refusal. Nothing reads that page: a browser's
WebSocket never exposes a failed handshake's body, and JupyterLab shows why from the kernel's
model (``GET /api/kernels/<id>``, whose ``reason`` jupyter_server sets from the same error). So
the answer keeps its status and has no body: the proxy writes the head and ends in one go.
"""

from __future__ import annotations

from typing import Any

from jupyter_server.services.kernels.connection.channels import ZMQChannelsWebsocketConnection
from tornado import web

# the server's setting its kernels' websocket handler reads the class from, per request
SETTING = "kernel_websocket_connection_class"


class BodilessStartFailure(ZMQChannelsWebsocketConnection):
    """jupyter_server's kernel websocket connection, but a handshake refused while preparing (a
    failed start) is answered with its status and an empty body instead of an error page."""

    async def prepare(self) -> None:
        try:
            await super().prepare()
        except web.HTTPError as exc:
            handler = self.websocket_handler
            # what tornado would have logged with the page; the kernel's model keeps the reason
            self.log.warning("%s %s: %s", exc.status_code, handler.request.path, exc.log_message or exc.reason or "")
            handler.set_status(exc.status_code)
            # ends the request as it stands (Content-Length 0), not through write_error's page
            raise web.Finish() from None


def install(settings: dict[str, Any], serverapp: Any) -> bool:
    """Use ``BodilessStartFailure`` for the server's kernel websockets where the server uses
    jupyter_server's own class; another one (an admin's, a gateway's) is left as it is. Returns
    whether it was installed. ``settings`` is the extension's own: jupyter_server copies the web
    app's settings into them before ``initialize_settings`` and them back into the web app after,
    so a change made to the web app's own in between would be undone."""
    if settings.get(SETTING) is not ZMQChannelsWebsocketConnection:
        return False
    settings[SETTING] = BodilessStartFailure
    # the server closes its open connections through its own trait's class when it stops
    serverapp.kernel_websocket_connection_class = BodilessStartFailure
    return True
