"""The hub process's one culler: built from the hub's config on first use, stopping servers
through the hub's REST API, and what ``install(c)`` adds to the hub's config for it."""

from __future__ import annotations

import time
from functools import partial
from typing import Any
from urllib.parse import quote

from jupyterhub.app import JupyterHub
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from jupyter_gpuburst.hub.culling.culler import TEMPLATE_VAR, Culler
from jupyter_gpuburst.hub.culling.settings import GPUCullingSettings
from jupyter_gpuburst.hub.kernels.service import LiveHub, default_registry
from jupyter_gpuburst.hub.queue import ends as queue_ends

ROLE_NAME = "gpuburst-gpu-culler"
_culler: Culler | None = None


def hub_culler(service_token: str) -> Culler:
    """The hub process's culler, built from the hub's config on first use; its loop runs from
    then. It stops servers with the ``gpuburst`` service's token."""
    global _culler
    if _culler is None:
        hub = LiveHub()
        settings = GPUCullingSettings(config=hub.config)
        _culler = Culler(settings, hub, default_registry, stop_server=partial(hub_api_stop, service_token), log=hub.log)
        queue_ends.provide(_culler.session_ends)
        if _enabled_anywhere(settings):
            _culler.start()
            hub.log.info("GPU culling on: GPUs idle for %.0f s are given back, after a warning", settings.timeout_seconds)
    return _culler


def _enabled_anywhere(settings: GPUCullingSettings) -> bool:
    overrides = [*settings.server_profiles.values(), *settings.kernel_profiles.values()]
    return settings.enabled or any(o.get("enabled") for o in overrides)


def install(c: Any, service_name: str) -> None:
    """Let the service stop servers, where culling is configured (before ``install(c)``), and
    the spawn page say why the culler stopped one."""
    if "GPUCullingSettings" not in c:
        return
    # a wrong key or value stops the hub here, at start, with the reason (TraitError)
    GPUCullingSettings(config=c)
    hub = c.JupyterHub
    template_vars = dict(hub.template_vars) if "template_vars" in hub else {}
    template_vars.setdefault(TEMPLATE_VAR, stopped_note)
    hub.template_vars = template_vars
    roles = list(hub.load_roles) if "load_roles" in hub else []
    if any(r.get("name") == ROLE_NAME for r in roles):
        return
    # the scopes jupyterhub-idle-culler needs to stop a server, and no more
    roles.append(
        {
            "name": ROLE_NAME,
            "description": "Stop servers whose GPUs sat idle (jupyter-gpuburst)",
            "services": [service_name],
            "scopes": ["read:users:name", "delete:servers"],
        }
    )
    hub.load_roles = roles


def idle_since(user: str, server_name: str, target: str) -> float | None:
    """Since when (hub clock) this server's (``target`` "server") or GPU kernel's GPUs have been
    idle, for the GPU-hours ledger's "held idle"; None when busy, GPU-less or not heard from
    lately: such time is counted as held, never as idle."""
    if _culler is None:
        return None
    signal = _culler.store.get(user, server_name, target)
    if signal is None or signal.last_busy is None or _culler.store.state(signal, time.time()) == "unknown":
        return None
    return max(signal.last_busy, signal.kept_at)


def refuses_start(user: str, server_name: str, kernel_id: Any) -> str | None:
    """Why a GPU kernel start is refused (the culler just stopped it), or None."""
    if _culler is None or not isinstance(kernel_id, str):
        return None
    return _culler.store.refuses_start(user, server_name, kernel_id)


def stopped_note(user: Any) -> str:
    """``JupyterHub.template_vars`` entry: why the culler stopped this user's default server."""
    name = getattr(user, "name", None)
    if _culler is None or name is None:
        return ""
    return _culler.stopped_servers.get((name, ""), ("", 0.0))[0]


async def hub_api_stop(token: str, user: str, server_name: str) -> str:
    """Stop a server through the hub's REST API with ``token``, as jupyterhub-idle-culler does;
    "stopped", "gone" (not running any more), or raises."""
    app = JupyterHub.instance()
    path = f"users/{quote(user, safe='')}/servers/{quote(server_name, safe='')}" if server_name else f"users/{quote(user, safe='')}/server"
    url = app.hub.api_url.rstrip("/") + "/" + path
    try:
        response = await AsyncHTTPClient().fetch(url, method="DELETE", headers={"Authorization": f"token {token}"}, request_timeout=120)
    except HTTPClientError as exc:
        if exc.code in (400, 404):
            # 400: "not running"; 404: no such user or server (stopped or deleted meanwhile)
            return "gone"
        body = exc.response.body.decode(errors="replace")[:200] if exc.response is not None else ""
        raise RuntimeError(f"the hub refused to stop {user}'s server {server_name!r}: {exc.code} {body}") from None
    # 202: the stop goes on in the hub; 204: done
    return "stopped" if response.code in (202, 204) else "gone"
