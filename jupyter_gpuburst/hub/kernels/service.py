"""Wiring of the GPU kernel registry into the hub process: one registry per capacity tracker."""

from __future__ import annotations

import logging
from typing import Any

from jupyter_gpuburst.hub.capacity import CapacityTracker
from jupyter_gpuburst.hub.kernels.registry import KernelRegistry
from jupyter_gpuburst.hub.kernels.settings import kernel_settings_from_config, spawner_setting

DEFAULT_IMAGE = "quay.io/jupyterhub/k8s-singleuser-sample:4.0.0"


async def registry_for(config: Any, log: logging.Logger) -> KernelRegistry:
    """The hub's registry, sharing the spawner's tracker (so one ledger holds servers and kernels)."""
    tracker = await CapacityTracker.ensure(config, log)

    def build() -> KernelRegistry:
        from kubespawner.clients import shared_client

        settings = kernel_settings_from_config(config)
        image = settings.image or spawner_setting(config, "image", "") or DEFAULT_IMAGE
        namespace = spawner_setting(config, "namespace", "") or "default"
        return KernelRegistry(tracker, settings, shared_client("CoreV1Api"), shared_client("CustomObjectsApi"), image, namespace, log)

    return KernelRegistry.for_tracker(tracker, build)


async def default_registry(handler: Any) -> KernelRegistry:
    registry = await registry_for(handler.settings["config"], handler.log)
    registry.start_reaper(server_running_check(handler.settings))
    return registry


def server_running_check(settings: dict[str, Any]) -> Any:
    """``(user, server) -> bool`` from the hub's own records (running or starting counts)."""
    from jupyterhub import orm

    def running(user_name: str, server_name: str) -> bool:
        db = settings["db"]
        orm_user = orm.User.find(db, user_name)
        if orm_user is None:
            return False
        user = settings["users"][orm_user]
        if server_name not in user.orm_spawners:
            return False
        return bool(user.spawners[server_name].active)

    return running


async def stop_server_kernels(spawner: Any) -> int:
    """Stop the GPU kernels of a server that is stopping (its pods, its reservations)."""
    # a CPU server's spawner may never have touched the tracker: ask every registry of the hub
    stopped = 0
    for registry in list(KernelRegistry._instances.values()):
        stopped += await registry.stop_server_kernels(spawner.user.name, spawner.name or "")
    return stopped
