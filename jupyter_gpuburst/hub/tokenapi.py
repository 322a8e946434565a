"""The base of the ``gpuburst`` service's APIs that users' servers call with their own token
(GPU kernels, GPU activity): JSON in and out, the token checked with the hub, never a cookie."""

from __future__ import annotations

import json
from typing import Any

from tornado import web

TOKEN_PREFIXES = ("token ", "bearer ")


class UserTokenHandler(web.RequestHandler):
    """``prepare`` sets ``self.user`` (the token owner's model) and ``self.token``; subclasses
    check the scopes they need in ``authorize``."""

    user: dict[str, Any]
    token: str

    @property
    def service(self) -> Any:
        return self.settings["service"]

    def check_xsrf_cookie(self) -> None:
        # tokens only, never cookies: a browser's ambient credentials cannot reach these APIs
        return None

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        exc = kwargs.get("exc_info", (None, None, None))[1]
        message = self._reason
        if isinstance(exc, web.HTTPError) and exc.log_message:
            message = exc.log_message % exc.args if exc.args else exc.log_message
        self.set_header("Content-Type", "application/json")
        self.finish(json.dumps({"status": status_code, "message": message}))

    async def prepare(self) -> None:
        self.set_header("Content-Type", "application/json")
        header = self.request.headers.get("Authorization", "")
        token = header.split(" ", 1)[1].strip() if header.lower().startswith(TOKEN_PREFIXES) else ""
        model = await self.service.hub_auth().user_for_token(token, sync=False) if token else None
        if not model:
            raise web.HTTPError(403, "Missing or invalid credentials.")
        self.token = token
        self.authorize(model)
        self.user = model

    def authorize(self, model: dict[str, Any]) -> None:
        """Raise a 403 with the reason when ``model`` may not use this API."""
        raise NotImplementedError
