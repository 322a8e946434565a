"""``POST /services/gpuburst/api/stop``: an admin stops a server or GPU kernel from the capacity page.

The body is ``{"target": key, "reason": text}``, a key the capacity report lists (``alice/`` or
``alice/gpu`` for servers, ``alice/kernel:<id>`` for GPU kernels) and, optionally, a line for its
user (at most ``REASON_MAX`` characters), who reads it where they read the stop's note. It needs the caller's own ``admin:servers``
(the page's ``admin:users`` lets an admin read, not stop): the service's scopes never stand in
for the admin's. A server is stopped through JupyterHub's REST API with the admin's own token,
so the hub checks and logs that admin; a GPU kernel through the hub's kernel registry, telling
its server why as GPU culling does (so the notebook hears it and no restarter takes the GPU
back). From the page, the request carries JupyterHub's XSRF token; a stop of something already
gone says so.
"""

from __future__ import annotations

import json
import logging
import re
import time
from functools import partial
from typing import Any

from jupyterhub.services.auth import check_scopes
from tornado import web

from jupyter_gpuburst.hub.culling.live import hub_api_stop, hub_culler
from jupyter_gpuburst.hub.kernels.registry import KernelError
from jupyter_gpuburst.hub.kernels.service import LiveHub, default_registry

STOP_PATH = "api/stop"
STOP_SCOPE = "admin:servers"
KERNEL_PREFIX = "kernel:"
# what the student reads: in the notebook of a stopped GPU kernel, on the spawn page of a server
KERNEL_NOTE = "This GPU kernel was stopped by the hub's admins{reason}. Restart the kernel to start it again on a free GPU."
SERVER_NOTE = "Your server was stopped by the hub's admins{reason}. Start it again when you need it."
REASON_MAX = 200


def parse_reason(value: Any) -> str:
    """The admin's reason as one short line ("" for none); a short 400 for anything else."""
    if value is None:
        return ""
    if not isinstance(value, str):
        raise web.HTTPError(400, "a stop's reason is text")
    reason = re.sub(r"\s+", " ", "".join(ch for ch in value if ch.isprintable() or ch.isspace())).strip()
    if len(reason) > REASON_MAX:
        raise web.HTTPError(400, f"a stop's reason is at most {REASON_MAX} characters")
    return reason


def note(template: str, reason: str) -> str:
    """What the user reads: the stop's note, with the admin's reason where one was given."""
    return template.format(reason=f": {reason.rstrip('.')}" if reason else "")


def _log() -> logging.Logger:
    """The hub's own log (stops are the admins' acts: they belong beside the hub's)."""
    try:
        return LiveHub().log
    except Exception:  # noqa: BLE001 - no running hub (a test of this module alone)
        return logging.getLogger(__name__)


def parse_target(target: Any) -> tuple[str, str, str | None]:
    """``(user, server_name, kernel record id or None)`` of a capacity report's key."""
    if not isinstance(target, str) or "/" not in target or len(target) > 512:
        raise web.HTTPError(400, 'a stop is {"target": "<user>/<server name>"} or {"target": "<user>/kernel:<id>"}')
    user, _, rest = target.partition("/")
    if not user:
        raise web.HTTPError(400, f"no user in {target!r}")
    if rest.startswith(KERNEL_PREFIX):
        record_id = rest.removeprefix(KERNEL_PREFIX)
        if not record_id:
            raise web.HTTPError(400, f"no GPU kernel in {target!r}")
        return user, "", record_id
    return user, rest, None


def handlers(prefix: str, base: type, service: Any) -> list[tuple[str, type]]:
    """The stop handler, on ``base``: the service's admin-authenticated handler class."""

    class StopHandler(base):  # type: ignore[misc, valid-type]
        def get_login_url(self) -> str:
            # an API client (or a page whose XSRF token does not match) gets 403, not a login page
            raise web.HTTPError(403, "Stopping needs a hub admin's login (admin:servers) and, from the page, its XSRF token")

        def write_error(self, status_code: int, **kwargs: Any) -> None:
            exc = kwargs.get("exc_info", (None, None, None))[1]
            message = exc.log_message if isinstance(exc, web.HTTPError) and exc.log_message else "The stop failed; the hub's log says why"
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps({"status": status_code, "message": message}))

        @web.authenticated
        async def post(self) -> None:
            admin = self.current_user
            if not check_scopes({STOP_SCOPE}, set(admin.get("scopes") or ())):
                _log().warning("Stop refused: %s lacks %s", admin.get("name"), STOP_SCOPE)
                raise web.HTTPError(403, f"Only the hub's admins may stop servers and GPU kernels (it needs {STOP_SCOPE}).")
            try:
                body = json.loads(self.request.body or b"{}")
            except ValueError:
                raise web.HTTPError(400, "the request body must be JSON") from None
            body = body if isinstance(body, dict) else {}
            user, server_name, record_id = parse_target(body.get("target"))
            reason = parse_reason(body.get("reason"))
            if record_id is not None:
                message = await self.stop_kernel(user, record_id, reason)
            else:
                message = await self.stop_server(user, server_name, reason)
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps({"message": message}))

        def what(self, user: str, server_name: str) -> str:
            return f"{user}'s server" + (f" {server_name!r}" if server_name else "")

        def log_stop(self, what: str, reason: str) -> None:
            admin = self.current_user.get("name")
            _log().info("Stop: %s stops %s from the capacity page%s", admin, what, f" (reason: {reason!r})" if reason else "")

        async def stop_server(self, user: str, server_name: str, reason: str = "") -> str:
            what = self.what(user, server_name)
            if LiveHub().active_spawner(user, server_name) is None:
                # the hub's API answers a stop of a stopped server as done: say what is true
                return f"{what} had already stopped."
            token = self.hub_auth.get_token(self)
            self.log_stop(what, reason)
            try:
                outcome = await hub_api_stop(token, user, server_name)
            except RuntimeError:
                _log().exception("Stop: the hub refused to stop %s", what)
                raise web.HTTPError(502, f"The hub did not stop {what}; its log says why.") from None
            if outcome == "gone":
                return f"{what} had already stopped."
            culler = _culler(service)
            if culler is not None:
                # the spawn page says why, as for a server the culler stopped
                culler.stopped_servers[(user, server_name)] = (note(SERVER_NOTE, reason), time.time())
            return f"{what} is stopping; its GPUs go back once its pod is gone."

        async def stop_kernel(self, user: str, record_id: str, reason: str = "") -> str:
            what = f"{user}'s GPU kernel {record_id}"
            try:
                registry = await (service.registry_source or default_registry)(LiveHub())
            except Exception:  # noqa: BLE001 - logged in full, reported in short
                _log().exception("Stop: GPU kernels are unavailable")
                raise web.HTTPError(503, "GPU kernels are unavailable now; the hub's log says why.") from None
            try:
                record = registry.get(user, record_id)
            except KernelError:
                return f"{what} had already stopped."
            if registry.state(record) in ("stopped", "failed"):
                return f"{what} had already stopped."
            self.log_stop(what, reason)
            culler = _culler(service)
            if culler is not None:
                await culler.stop_kernel(registry, record, note(KERNEL_NOTE, reason))
            else:
                await registry.stop(record, wait=0)
            return f"{what} is stopped; its GPU goes back once its pod is gone."

    return [(rf"{prefix}{STOP_PATH}/?", StopHandler)]


def _culler(service: Any) -> Any:
    """The hub's culler (it tells a GPU kernel's server why, and keeps the spawn page's note)."""
    try:
        source = service.culler_source or partial(hub_culler, service.token)
        return source()
    except Exception:  # noqa: BLE001 - the stop itself does not need it
        _log().warning("Stop: the culler is unavailable; the student is not told why", exc_info=True)
        return None
