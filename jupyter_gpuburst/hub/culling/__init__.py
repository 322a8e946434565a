"""GPU idle culling, hub side: the activity API, the signal store, the policy and the culler loop.

Off by default. ``install(c)`` of ``jupyter_gpuburst.hub`` serves the activity API on the
``gpuburst`` service and, where ``c.GPUCullingSettings`` is configured, grants that service the
``delete:servers`` scope the culler stops servers with (docs/culling.md).
"""

from __future__ import annotations

from typing import Any

from jupyter_gpuburst.core import keys
from jupyter_gpuburst.hub.culling.culler import TEMPLATE_VAR, Culler, stopped_note
from jupyter_gpuburst.hub.culling.handlers import handlers
from jupyter_gpuburst.hub.culling.settings import CullPolicy, GPUCullingSettings

__all__ = ["Culler", "CullPolicy", "GPUCullingSettings", "handlers", "hub_culler", "install", "server_env"]

ROLE_NAME = "gpuburst-gpu-culler"
_culler: Culler | None = None


def hub_culler() -> Culler:
    """The hub process's culler, built from the hub's config on first use; its loop runs from then."""
    global _culler
    if _culler is None:
        from jupyter_gpuburst.hub.kernels.service import LiveHub, default_registry

        hub = LiveHub()
        settings = GPUCullingSettings(config=hub.config)
        _culler = Culler(settings, hub, default_registry, log=hub.log)
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
    roles.append({"name": ROLE_NAME, "description": "Stop servers whose GPUs sat idle (jupyter-gpuburst)", "services": [service_name], "scopes": ["read:users:name", "delete:servers"]})
    hub.load_roles = roles


def server_env() -> dict[str, str]:
    """Where a user's server reports its GPU activity (nothing without the service)."""
    from jupyter_gpuburst.hub.service import registered

    service = registered()
    return {keys.ACTIVITY_URL_ENV: f"{service.url}{service.prefix}{keys.ACTIVITY_API_PATH}"} if service is not None else {}


def refuses_start(user: str, server_name: str, kernel_id: Any) -> str | None:
    """Why a GPU kernel start is refused (the culler just stopped it), or None."""
    if _culler is None or not isinstance(kernel_id, str):
        return None
    return _culler.store.refuses_start(user, server_name, kernel_id)

