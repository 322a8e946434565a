"""The hub process's lab book: its scope registered at ``install(c)``, opened once the hub runs
(from the hub's whole config, so ``c.LabSettings`` may stand before or after ``install(c)``),
and read by the warm pools (``booked_pools``) and the labs page."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from pathlib import Path
from typing import Any

from jupyter_gpuburst.core import keys
from jupyter_gpuburst.core.snapshot import is_gpu_resource
from jupyter_gpuburst.hub.labs.book import LabBook
from jupyter_gpuburst.hub.labs.settings import SCOPE, SCOPE_DESCRIPTION, STORE_FILE, LabSettings
from jupyter_gpuburst.hub.labs.store import LabStore
from jupyter_gpuburst.hub.queue import classes

_book: LabBook | None = None
# whether the book was read (opened, or found off or unable to open): until then no one knows
# which pools bookings ask for, and the warm pools must not drain a booked pool's pods
_read = False


def install(c: Any, tracker_source: Any) -> None:
    """Define the labs scope, and open the book once the hub's event loop runs."""
    hub = c.JupyterHub
    if "custom_scopes" in hub and isinstance(hub["custom_scopes"], dict):
        hub.custom_scopes = {SCOPE: {"description": SCOPE_DESCRIPTION}, **hub["custom_scopes"]}
    else:
        # unset, or additions made before us: stay an addition, as culling's role does
        hub.custom_scopes.update({SCOPE: {"description": SCOPE_DESCRIPTION}})
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return  # the config is only being read (not by a starting hub)
    loop.call_soon(lambda: asyncio.ensure_future(_open(c, tracker_source)))


def book() -> LabBook | None:
    return _book


def booked_pools(now: Any) -> list[Any] | None:
    """The pools active bookings ask for now (the warm pools' ``booked``); None until the book
    is read (a restarted hub's first pool pass may come first)."""
    if not _read:
        return None
    return _book.pools(now) if _book is not None else []


def gpu_profiles(config: Any) -> dict[str, tuple[str, int]]:
    """Profile slug -> (its GPU resource, units per server), for the spawner's GPU profiles."""
    # imported here: the pools' settings import the spawner, which imports the service (whose
    # handlers this package serves); the hub imports them all before it runs this
    from jupyter_gpuburst.hub.pools.settings import profile_shape, spawner_values

    base, profiles = spawner_values(config)
    found = {}
    for profile in profiles:
        slug = profile.get("slug") if isinstance(profile, dict) else None
        try:
            shape = profile_shape(slug, base, profiles) if slug else None
        except (KeyError, ValueError, TypeError):
            continue
        gpus = {r: int(float(v)) for r, v in (shape.limits if shape else {}).items() if is_gpu_resource(r)}
        if gpus:
            resource = sorted(gpus)[0]
            found[slug] = (resource, gpus[resource])
    return found


def gpu_kernel_profiles(config: Any, log: logging.Logger) -> dict[str, tuple[str, int]]:
    """GPU kernel profile slug -> (its GPU resource, units per kernel): what labs in kernel mode book."""
    from traitlets import TraitError

    from jupyter_gpuburst.hub.kernels.settings import kernel_settings_from_config

    try:
        profiles = kernel_settings_from_config(config).kernel_profiles()
    except (ValueError, TraitError) as exc:  # the kernel API says the same at its start; servers may still be booked
        log.warning("Labs book no GPU kernels: %s", exc)
        return {}
    return {slug: (p.resource, p.count) for slug, p in profiles.items()}


def store_path(config: Any, settings: LabSettings) -> str:
    if settings.store_path:
        return settings.store_path
    db_url = str(config.JupyterHub.db_url) if "JupyterHub" in config and "db_url" in config.JupyterHub else "sqlite:///jupyterhub.sqlite"
    if db_url.startswith("sqlite:///") and db_url != "sqlite:///:memory:":
        return str(Path(db_url.removeprefix("sqlite:///")).parent / STORE_FILE)
    return os.path.join(os.getcwd(), STORE_FILE)


def class_use(tracker: Any, group: str, resource: str) -> int:
    """The units of ``resource`` that pods of ``group``'s members hold (the spawner notes a
    server's groups on its pod; warm pools' placeholders are nobody's)."""
    used = 0
    for pod in tracker.placed_pods():
        annotations = pod["metadata"].get("annotations") or {}
        try:
            groups = json.loads(annotations.get(keys.GROUPS_ANNOTATION) or "[]")
        except ValueError:
            continue
        if group in groups and pod["metadata"].get("labels", {}).get(keys.COMPONENT_LABEL) != keys.POOL_COMPONENT:
            used += tracker.inventory.pod_requests(pod).get(resource, 0)
    return used


def report_sources(tracker: Any) -> dict[str, Any]:
    """What a lab's report reads: the GPU-hours ledger (where accounting is on) and the hub's groups."""
    from jupyterhub import orm
    from jupyterhub.app import JupyterHub

    accounting = getattr(tracker, "accounting", None)

    def usage(group: str, first: str, last: str) -> list[dict[str, Any]]:
        return accounting.ledger.usage_rows(first, last, group=group) if accounting is not None else []

    def members(group: str) -> list[str]:
        found = orm.Group.find(JupyterHub.instance().db, group)
        return [u.name for u in found.users] if found is not None else []

    return {"usage": usage, "members": members, "counts_idle": lambda: bool(accounting is not None and accounting.ledger.counts_idle)}


def hub_groups() -> list[str]:
    from jupyterhub import orm
    from jupyterhub.app import JupyterHub

    return [name for (name,) in JupyterHub.instance().db.query(orm.Group.name)]


async def _open(c: Any, tracker_source: Any) -> None:
    global _read
    try:
        await _open_book(c, tracker_source)
    finally:
        _read = True


async def _open_book(c: Any, tracker_source: Any) -> None:
    global _book
    from jupyterhub.app import JupyterHub

    from jupyter_gpuburst.hub.pools.settings import WarmPools

    log = logging.getLogger("JupyterHub")
    config = JupyterHub.instance().config if JupyterHub.initialized() else c
    settings = LabSettings(config=config)
    if not settings.enabled:
        return
    try:
        tracker = tracker_source()
        if asyncio.iscoroutine(tracker):
            tracker = await tracker
        path = store_path(config, settings)
        _book = LabBook(
            LabStore(path),
            settings,
            WarmPools(config=config).tz(),
            gpu_profiles(config),
            hub_groups,
            tracker.snapshot,
            class_use=lambda group, resource: class_use(tracker, group, resource),
            sources=report_sources(tracker),
            kernel_profiles=gpu_kernel_profiles(config, log),
        )
        classes.provide(
            _book.goes_first, _book.hold_for, _book.note_start, _book.note_kernel_asked, _book.note_first_cell, _book.note_server_first_cell
        )
        log.info("Lab bookings are kept in %s (%d booked)", path, len(_book.bookings()))
    except Exception:
        log.exception("Lab bookings could not open; the labs page is unavailable")
