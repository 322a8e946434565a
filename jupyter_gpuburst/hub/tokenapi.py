"""The base of the ``gpuburst`` service's APIs that users' servers call with their own token
(GPU kernels, GPU activity): JSON in and out, the token checked with the hub, never a cookie.

A server's own token is readable by the server's code, and so by whoever the server is shared
with (JupyterHub's ``shares``): such a token acts for its own server only, never for the user's
other servers. A token the hub no longer knows (its server just stopped: HubAuth's cache still
accepts it for up to a minute) gets nothing.
"""

from __future__ import annotations

import json
from typing import Any

from tornado import web

TOKEN_PREFIXES = ("token ", "bearer ")
MIB = 1024 * 1024
# a request body past this is refused (413) and never kept: Tornado alone would buffer 100 MB
MAX_BODY_BYTES = 4 * MIB


class UnknownToken(Exception):
    """The hub has no record of the token (or of the server it was made for)."""


@web.stream_request_body
class UserTokenHandler(web.RequestHandler):
    """``prepare`` sets ``self.user`` (the token owner's model) and ``self.token``; subclasses
    check the scopes they need in ``authorize``. The body is read as it comes, and kept only
    while it is within ``max_body_bytes``: read it with ``body_bytes()``."""

    user: dict[str, Any]
    token: str
    # the server whose own token called; None: a token of the user's own, for all their servers
    token_server: str | None = None
    max_body_bytes = MAX_BODY_BYTES

    @property
    def service(self) -> Any:
        return self.settings["service"]

    def check_xsrf_cookie(self) -> None:
        # tokens only, never cookies: a browser's ambient credentials cannot reach these APIs
        return None

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        # A refusal in prepare() comes before the streamed body is read, and Tornado then closes
        # the connection after the reply. Said in the reply, the proxy (configurable-http-proxy)
        # does not send the next request on that socket: unsaid, it did, and the student's next
        # call got a 503 for the reset (seen on a kernel DELETE right after a refused GET).
        self.set_header("Connection", "close")
        exc = kwargs.get("exc_info", (None, None, None))[1]
        message = self._reason
        if isinstance(exc, web.HTTPError) and exc.log_message:
            message = exc.log_message % exc.args if exc.args else exc.log_message
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"status": status_code, "message": message}))

    async def prepare(self) -> None:
        self._chunks: list[bytes] = []
        self._received = 0
        self.set_header("Content-Type", "application/json")
        header = self.request.headers.get("Authorization", "")
        token = header.split(" ", 1)[1].strip() if header.lower().startswith(TOKEN_PREFIXES) else ""
        model = await self.service.hub_auth().user_for_token(token, sync=False) if token else None
        if not model:
            raise web.HTTPError(403, "Missing or invalid credentials.")
        self.token = token
        self.authorize(model)
        self.user = model

    def data_received(self, chunk: bytes) -> None:
        # a body past the limit is still read to its end (a reply sent before that, with the
        # connection closed on unread data, can reach the client as a reset instead), not kept
        self._received += len(chunk)
        if self._received <= self.max_body_bytes:
            self._chunks.append(chunk)
        else:
            self._chunks.clear()

    def body_bytes(self) -> bytes:
        """The request body; 413 when it was larger than ``max_body_bytes``."""
        if self._received > self.max_body_bytes:
            raise web.HTTPError(413, f"the request body is larger than {_size(self.max_body_bytes)}")
        return b"".join(self._chunks)

    def authorize(self, model: dict[str, Any]) -> None:
        """Raise a 403 with the reason when ``model`` may not use this API."""
        raise NotImplementedError

    def resolve_token_server(self, hub: Any, user_name: str) -> None:
        """Set ``token_server`` from the hub's own records (``hub.server_of_token``); 403 when
        the hub no longer knows the token."""
        try:
            self.token_server = hub.server_of_token(user_name, self.token)
        except UnknownToken:
            raise web.HTTPError(403, "This token is no longer valid (its server has stopped).") from None

    def check_server(self, server_name: str) -> None:
        """403 unless the token may act for ``server_name`` of its user."""
        if self.token_server is not None and server_name != self.token_server:
            raise web.HTTPError(403, "A server's token acts for that server only.")


def _size(limit: int) -> str:
    return f"{limit / MIB:g} MiB" if limit >= MIB else f"{limit / 1024:g} KiB"
