"""Remote GPU kernels, hub side: the kernel-placement API, kernel pods and their reaper.

Mounted by ``jupyter_gpuburst.hub.install(c)`` (see ``install`` below), which also defines the
custom scope users need. Grant it per group in ``jupyterhub_config.py``::

    c.JupyterHub.load_roles = [
        {"name": "gpu-kernels", "scopes": ["custom:gpuburst:kernels"], "groups": ["gpu-students"]},
    ]
"""

from __future__ import annotations

from typing import Any

from jupyter_gpuburst.hub.kernels.handlers import API_PATH, SCOPE, SCOPE_DESCRIPTION, handlers

__all__ = ["API_PATH", "SCOPE", "handlers", "install"]


def install(c: Any, registry_source: Any = None) -> list[tuple[str, type, dict[str, Any]]]:
    """Define the kernel scope, let servers' tokens carry it, and return the API's routes.

    The routes are for ``JupyterHub.extra_handlers`` today (``jupyter_gpuburst.hub.install``
    adds them); they need nothing from the hub but its handler base classes, so they can move
    into a hub-managed service unchanged.
    """
    section = c.JupyterHub
    scopes = dict(section["custom_scopes"]) if "custom_scopes" in section else {}
    scopes.setdefault(SCOPE, {"description": SCOPE_DESCRIPTION})
    section.custom_scopes = scopes
    spawner = c.Spawner
    if "server_token_scopes" not in spawner:
        from jupyterhub.roles import get_default_roles

        server_role = next(r for r in get_default_roles() if r["name"] == "server")
        # a token only gets the scopes its user holds: users without the role get none of it
        spawner.server_token_scopes = list(server_role["scopes"]) + [f"{SCOPE}!user"]
    return handlers(registry_source)
