"""Remote GPU kernels, hub side: the kernel-placement API, kernel pods and their reaper.

The API is part of the ``gpuburst`` JupyterHub service (``jupyter_gpuburst.hub.install(c)``
registers it), at ``/services/gpuburst/api/kernels``. A user's server reaches it directly at the
URL the spawner puts in ``$JUPYTER_GPUBURST_KERNELS_URL``, with its own token. Grant the two
scopes that token needs per group in ``jupyterhub_config.py``::

    c.JupyterHub.load_roles = [
        {"name": "gpu-kernels", "groups": ["gpu-students"],
         "scopes": ["custom:gpuburst:kernels", "access:services!service=gpuburst"]},
    ]
"""

from __future__ import annotations

from typing import Any

from jupyter_gpuburst.hub.kernels.handlers import API_PATH, SCOPE, SCOPE_DESCRIPTION, access_scope, handlers

__all__ = ["API_PATH", "KERNELS_URL_ENV", "SCOPE", "handlers", "install", "server_token_scopes"]

# Where a user's server finds the kernel API (set by the spawner; see jupyter_gpuburst.hub.service)
KERNELS_URL_ENV = "JUPYTER_GPUBURST_KERNELS_URL"
SPAWNER_SECTIONS = ("Spawner", "KubeSpawner", "GPUBurstSpawner")


def server_token_scopes(service_name: str) -> list[str]:
    """What a server's token must carry to use the kernel API; JupyterHub keeps only those its
    owner holds, so users without the admin's role get none of them."""
    return [access_scope(service_name), f"{SCOPE}!user"]


def install(c: Any, service_name: str) -> None:
    """Define the kernel scope and let servers' tokens carry the kernel API's scopes.

    ``Spawner.server_token_scopes`` set by the admin (in any spawner section) keeps its scopes
    and gains ours; unset, it becomes the ``server`` role's scopes plus ours.
    """
    section = c.JupyterHub
    scopes = dict(section["custom_scopes"]) if "custom_scopes" in section else {}
    scopes.setdefault(SCOPE, {"description": SCOPE_DESCRIPTION})
    section.custom_scopes = scopes
    ours = server_token_scopes(service_name)
    configured = [name for name in SPAWNER_SECTIONS if name in c and "server_token_scopes" in c[name]]
    if not configured:
        # unset reads as empty, which JupyterHub takes as the server role's scopes
        c.Spawner.server_token_scopes = _with_scopes([], ours)
        return
    for name in configured:
        c[name].server_token_scopes = _with_scopes(c[name]["server_token_scopes"], ours)


def _with_scopes(value: Any, ours: list[str]) -> Any:
    if callable(value):
        from jupyterhub.utils import maybe_future

        async def scopes(spawner: Any) -> list[str]:
            theirs = await maybe_future(value(spawner))
            return _with_scopes(list(theirs or []), ours)

        return scopes
    theirs = list(value or [])
    if not theirs:
        # empty means "the server role" to JupyterHub: keep that meaning
        from jupyterhub.roles import get_default_roles

        theirs = list(next(r for r in get_default_roles() if r["name"] == "server")["scopes"])
    return theirs + [s for s in ours if s not in theirs]


def server_env() -> dict[str, str]:
    """The env a user's server needs to reach the kernel API (nothing when the service is not
    registered in this hub process: then no server is offered GPU kernels)."""
    from jupyter_gpuburst.hub.service import registered

    from jupyter_gpuburst.hub.culling import server_env as activity_env

    service = registered()
    return {KERNELS_URL_ENV: service.kernels_url, **activity_env()} if service is not None else {}
