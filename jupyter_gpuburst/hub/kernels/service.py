"""Wiring of the GPU kernel registry into the hub process: one registry per capacity tracker,
and the hub's own records (users, groups, running servers) as the kernel API reads them."""

from __future__ import annotations

import logging
from typing import Any, ClassVar

from jupyter_gpuburst.hub.capacity.tracker import CapacityTracker
from jupyter_gpuburst.hub.kernels.registry import KernelRegistry
from jupyter_gpuburst.hub.kernels.settings import kernel_settings_from_config, spawner_setting
from jupyter_gpuburst.hub.tokenapi import UnknownToken

DEFAULT_IMAGE = "quay.io/jupyterhub/k8s-singleuser-sample:4.0.0"


class LiveHub:
    """The running JupyterHub's config, log and records, read in its own process and loop.

    The kernel API is served by the ``gpuburst`` service's HTTP server, which runs in the hub
    process (hub/service.py says why): it reads the hub's in-memory users and spawners as the
    hub's own handlers do, on the same event loop, and never writes to them.
    """

    # a user's id by name, for every LiveHub of the process (each request makes its own): a
    # kernel request and each of its polls ask for their user several times
    _ids: ClassVar[dict[str, int]] = {}

    @property
    def app(self) -> Any:
        from jupyterhub.app import JupyterHub

        return JupyterHub.instance()

    @property
    def config(self) -> Any:
        return self.app.config

    @property
    def log(self) -> logging.Logger:
        return self.app.log

    def _user(self, name: str) -> Any:
        """The hub's User of ``name`` (None: no such user), from the hub's own cache of users.

        A query by name runs only the first time: at a lab's start the database queries (with
        the user's roles and groups loaded each time) were a sixth of the hub's busy time. The
        hub's cache drops a deleted user, and a renamed one no longer answers to the old name.
        """
        from jupyterhub import orm

        users = self.app.users
        known = self._ids.get(name)
        if known is not None and dict.__contains__(users, known):
            user = dict.__getitem__(users, known)
            if user.name == name:
                return user
        self._ids.pop(name, None)
        orm_user = orm.User.find(self.app.db, name)
        if orm_user is None:
            return None
        self._ids[name] = orm_user.id
        return users[orm_user]

    def active_spawner(self, user_name: str, server_name: str) -> Any:
        """The user's spawner of ``server_name`` when it runs or starts, else None."""
        user = self._user(user_name)
        if user is None or server_name not in user.orm_spawners:
            return None
        spawner = user.spawners[server_name]
        return spawner if spawner.active else None

    def server_of_token(self, user_name: str, token: str) -> str | None:
        """The name of the user's server whose own token ``token`` is; None for a token of the
        user's own (one they made, or a login's); raises ``UnknownToken`` when the hub has no
        such token of this user, or it was a server's whose server is gone.

        JupyterHub notes each server's token "Server at <its URL>" when it starts the server
        (and deletes it when the server stops), or "retrieved from spawner <name>" when a
        resumed server brought its own.
        """
        from jupyterhub import orm
        from jupyterhub.utils import url_escape_path, url_path_join

        user = self._user(user_name)
        orm_token = orm.APIToken.find(self.app.db, token) if user is not None else None
        if orm_token is None or orm_token.user_id != user.id:
            raise UnknownToken(user_name)
        note = orm_token.note or ""
        for server_name in user.orm_spawners:
            if note in (
                f"Server at {url_path_join(user.base_url, url_escape_path(server_name), '/')}",
                f"retrieved from spawner {server_name}",
            ):
                return server_name
        if note.startswith(("Server at ", "retrieved from spawner ")):
            raise UnknownToken(user_name)  # a server's token whose server the hub no longer has
        return None

    def is_admin(self, user_name: str) -> bool:
        """Whether the hub's own record says the user is an admin (a server's token cannot
        show it: its model carries the token's scopes, not the owner's)."""
        user = self._user(user_name)
        return bool(getattr(user, "admin", False)) if user is not None else False

    def server_profile(self, user_name: str, server_name: str) -> str | None:
        """The slug of the profile the user picked for ``server_name`` (None when it has none)."""
        spawner = self.active_spawner(user_name, server_name)
        profile = (getattr(spawner, "user_options", None) or {}).get("profile") if spawner is not None else None
        return profile if isinstance(profile, str) else None

    def groups(self, user_name: str) -> frozenset[str]:
        user = self._user(user_name)
        return frozenset(g.name for g in getattr(user, "groups", None) or []) if user is not None else frozenset()

    def server_running(self, user_name: str, server_name: str) -> bool:
        return self.active_spawner(user_name, server_name) is not None


def kernel_image(config: Any, settings: Any) -> str:
    """The image of GPU kernels that name none: the kernel settings', else the spawner's."""
    return settings.image or spawner_setting(config, "image", "") or DEFAULT_IMAGE


async def registry_for(config: Any, log: logging.Logger) -> KernelRegistry:
    """The hub's registry, sharing the spawner's tracker (so one ledger holds servers and kernels)."""
    tracker = await CapacityTracker.ensure(config, log)

    def build() -> KernelRegistry:
        from kubespawner.clients import shared_client

        from jupyter_gpuburst.hub.pools.kernelsites import KernelPoolSites
        from jupyter_gpuburst.hub.pools.settings import WarmPools

        settings = kernel_settings_from_config(config)
        namespace = spawner_setting(config, "namespace", "") or "default"
        registry = KernelRegistry(
            tracker, settings, shared_client("CoreV1Api"), shared_client("CustomObjectsApi"), kernel_image(config, settings), namespace, log
        )
        # where pre-started kernels wait (hub/pools keeps them, for the admin and for booked labs):
        # a start there tries them first
        registry.prestarted = KernelPoolSites({(p["site"], p["profile"]) for p in WarmPools(config=config).kernels if p.get("count")})
        return registry

    return KernelRegistry.for_tracker(tracker, build)


async def default_registry(hub: LiveHub) -> KernelRegistry:
    registry = await registry_for(hub.config, hub.log)
    registry.start_reaper(hub.server_running)
    return registry


async def stop_server_kernels(spawner: Any) -> int:
    """Stop the GPU kernels of a server that is stopping (its pods, its reservations)."""
    # a CPU server's spawner may never have touched the tracker: ask every registry of the hub
    stopped = 0
    for registry in list(KernelRegistry._instances.values()):
        stopped += await registry.stop_server_kernels(spawner.user.name, spawner.name or "")
    return stopped
