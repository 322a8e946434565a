"""Who may use the kernel API: the kernel scope, and servers' tokens that carry it.

Grant the two scopes a server's token needs per group in ``jupyterhub_config.py``::

    c.JupyterHub.load_roles = [
        {"name": "gpu-kernels", "groups": ["gpu-students"],
         "scopes": ["custom:gpuburst:kernels", "access:services!service=gpuburst"]},
    ]
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from jupyterhub.roles import get_default_roles
from jupyterhub.utils import maybe_future

from jupyter_gpuburst.hub.kernels.handlers import SCOPE, SCOPE_DESCRIPTION, access_scope
from jupyter_gpuburst.hub.kernels.settings import profile_notes

SPAWNER_SECTIONS = ("Spawner", "KubeSpawner", "GPUBurstSpawner")
_EXPLAINED: set[int] = set()


def server_token_scopes(service_name: str) -> list[str]:
    """What a server's token must carry to use the kernel API; JupyterHub keeps only those its
    owner holds, so users without the admin's role get none of them."""
    return [access_scope(service_name), f"{SCOPE}!user"]


def install(c: Any, service_name: str) -> None:
    """Define the kernel scope and let servers' tokens carry the kernel API's scopes.

    ``Spawner.server_token_scopes`` set by the admin (in any spawner section) keeps its scopes
    and gains ours; unset, it becomes the ``server`` role's scopes plus ours.
    """
    _explain_profiles_at_start(c)
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


def _explain_profiles_at_start(c: Any) -> None:
    """Once the hub runs (the whole config read), log why no GPU kernel profile was derived."""

    def explain() -> None:
        for note in profile_notes(c):
            logging.getLogger("JupyterHub").warning(note)

    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return  # the config is only being read (not by a starting hub)
    if id(c) not in _EXPLAINED:  # install(c) may be called twice
        _EXPLAINED.add(id(c))
        loop.call_soon(explain)


def _with_scopes(value: Any, ours: list[str]) -> Any:
    if callable(value):

        async def scopes(spawner: Any) -> list[str]:
            theirs = await maybe_future(value(spawner))
            return _with_scopes(list(theirs or []), ours)

        return scopes
    theirs = list(value or [])
    if not theirs:
        # empty means "the server role" to JupyterHub: keep that meaning
        theirs = list(next(r for r in get_default_roles() if r["name"] == "server")["scopes"])
    return theirs + [s for s in ours if s not in theirs]
