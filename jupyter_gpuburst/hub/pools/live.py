"""The hub process's warm pools: checked by ``install(c)`` and started with the hub, from its
whole config, run beside the capacity tracker, shown on the capacity page (``report``)."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from jupyterhub.app import JupyterHub
from traitlets import TraitError

from jupyter_gpuburst.hub.pools import kernelsites
from jupyter_gpuburst.hub.pools.controller import PoolController
from jupyter_gpuburst.hub.pools.settings import KERNELS, SECTION, Pool, WarmPools, profile_shape, spawner_values

HUB_APPEARS_S = 60.0  # a hub is instantiated before it reads its config; later than this there is none
_controller: PoolController | None = None


def install(c: Any, tracker_source: Any, booked: Any = None) -> None:
    """Check ``c.WarmPools`` as it stands (a bad pool stops the hub here, with the reason) and,
    once the hub runs, start the pools from the hub's whole config: pool settings written after
    ``install(c)`` count as those before it (``start_with_hub``). ``tracker_source()`` gives the
    hub's capacity tracker; ``booked(now)`` the pools lab bookings ask for now (hub/labs), which
    keep the pools running without any static pool."""
    if SECTION in c:
        plan(c, booked)
    check_when_read(c, booked)
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return  # the config is only being read (not by a starting hub)
    loop.call_soon(lambda: asyncio.ensure_future(start_with_hub(c, tracker_source, booked)))


@dataclass(frozen=True)
class Plan:
    """What the pools of a config need to run."""

    settings: WarmPools
    shapes: dict[str, Any]
    namespace: str
    kernel_pods: dict[str, Any]
    # what makes the pods of any pre-started kernel pool, where bookings may ask for one
    kernel_pod_for: Any = None


def plan(c: Any, booked: Any = None) -> Plan | None:
    """The pools ``c`` asks for, None where it asks for none (and no booking may); ValueError
    or TraitError, with the reason, for a bad pool."""
    if SECTION not in c and booked is None:
        return None
    settings = WarmPools(config=c)
    base, profiles = spawner_values(c)
    shapes = {}
    for pool in settings.pool_list():
        if pool.kind == KERNELS:
            continue
        try:
            shapes[pool.profile] = profile_shape(pool.profile, base, profiles)
        except KeyError:
            raise ValueError(f"WarmPools.pools: no profile {pool.profile!r} in the spawner's profile_list") from None
    if booked is not None:
        # a booking may name any GPU profile: each one's shape, where the profile has one
        for profile in profiles:
            slug = profile.get("slug") if isinstance(profile, dict) else None
            if slug and slug not in shapes:
                try:
                    shapes[slug] = profile_shape(slug, base, profiles)
                except (KeyError, ValueError, TypeError):
                    continue
    elif not settings.pools and not settings.kernels:
        return None
    namespace = settings.namespace or base.get("namespace") or "default"
    kernel_pod_for = kernel_pod_factory(c, settings, namespace) if booked is not None else None
    return Plan(settings, shapes, namespace, kernel_pod_builders(c, settings, namespace), kernel_pod_for)


def check_when_read(c: Any, booked: Any = None) -> None:
    """Where a hub is reading this file: check its pools again once the whole file is read, so
    that a bad pool written after ``install(c)`` stops the hub as one before it does.

    The hub loads its traits from the file's config then (``update_config``), ``template_paths``
    among them: ``install(c)`` always adds ours, so the trait changes, and our check of it
    interrupts the load with the reason, as any error in the file does, before anything of the
    hub starts. (The ``config`` trait itself fires nothing: the hub replaces it with an equal copy.)"""
    if not JupyterHub.initialized():
        return
    app = JupyterHub.instance()

    def check(change: Any) -> None:
        app.unobserve(check, names="template_paths")
        plan(c, booked)

    app.observe(check, names="template_paths")


async def start_with_hub(c: Any, tracker_source: Any, booked: Any = None) -> None:
    """Start the pools of the hub's whole config (``c``, the file's, where the hub has none of
    its own: a program that only reads the config). A bad pool here is one no hub read the file
    for (``check_when_read`` stops a hub at it): the pools stay off, and the log says why."""
    # JupyterHub.instance() would make a hub where there is none (hub/culling/live.py says why)
    deadline = asyncio.get_running_loop().time() + HUB_APPEARS_S
    while not JupyterHub.initialized():
        if asyncio.get_running_loop().time() > deadline:
            return
        await asyncio.sleep(0.2)
    hub_config = JupyterHub.instance().config
    # the hub's holds the file's and its command line's; without pools it holds nothing of ours
    config = hub_config if SECTION in hub_config else c
    try:
        planned = plan(config, booked)
    except (ValueError, TraitError) as exc:
        logging.getLogger("JupyterHub").error("Warm pools are off: %s", exc)
        return
    if planned is not None:
        await _start(
            planned.settings,
            planned.shapes,
            planned.namespace,
            tracker_source,
            planned.kernel_pods,
            booked,
            kernel_pod_for=planned.kernel_pod_for,
        )


def kernel_pod_builders(c: Any, settings: WarmPools, namespace: str) -> dict[str, Any]:
    """What makes a pod of each pre-started kernel pool, by pool name; ValueError for a pool
    naming no GPU kernel profile."""
    if not settings.kernels:
        return {}
    kernel_settings, profiles, image = _kernel_context(c)
    builders = {}
    for pool in settings.pool_list():
        if pool.kind != KERNELS:
            continue
        profile = profiles.get(pool.profile)
        if profile is None:
            offered = ", ".join(sorted(profiles)) or "none"
            raise ValueError(f"WarmPools.kernels: no GPU kernel profile {pool.profile!r} (offered: {offered})")
        builders[pool.name] = _kernel_builder(kernel_settings, profile, image, namespace, settings, pool)
    return builders


def kernel_pod_factory(c: Any, settings: WarmPools, namespace: str) -> Callable[[Pool], Any]:
    """What makes the pods of any pre-started kernel pool (a booked lab's: its sites and profile
    are known only once it is on), None for a pool naming no GPU kernel profile. The kernel
    settings are read at the first call, and a bad one makes none (the kernel API says why)."""
    read: list[tuple[Any, dict[str, Any], str]] = []

    def builder(pool: Pool) -> Any:
        if not read:
            try:
                read.append(_kernel_context(c))
            except (ValueError, TraitError):
                read.append((None, {}, ""))
        kernel_settings, profiles, image = read[0]
        profile = profiles.get(pool.profile)
        return _kernel_builder(kernel_settings, profile, image, namespace, settings, pool) if profile is not None else None

    return builder


def _kernel_context(c: Any) -> tuple[Any, dict[str, Any], str]:
    """The kernel settings of ``c``, its GPU kernel profiles by slug, and the kernels' image."""
    from jupyter_gpuburst.hub.kernels.service import kernel_image
    from jupyter_gpuburst.hub.kernels.settings import kernel_settings_from_config

    kernel_settings = kernel_settings_from_config(c)
    return kernel_settings, kernel_settings.kernel_profiles(), kernel_image(c, kernel_settings)


def _kernel_builder(kernel_settings: Any, profile: Any, image: str, namespace: str, settings: WarmPools, pool: Pool) -> Any:
    from jupyter_gpuburst.hub.kernels import prestarted

    pod = functools.partial(
        prestarted.pooled_pod,
        pool.site,
        profile,
        kernel_settings,
        image,
        prestarted.pool_namespace(namespace, pool.site),  # a donor's: its kernel namespace
        settings.priority_class,
        list(settings.kernel_preload),
    )
    return functools.partial(_hooked, kernel_settings, pod, prestarted.site_placement(pool.site, profile))


async def _hooked(kernel_settings: Any, pod: Any, placement: Any) -> dict[str, Any]:
    """A pre-started kernel's pod as the admin's ``modify_pod_hook`` leaves every kernel pod: an
    adopted kernel is a kernel pod like any other, with the same changes."""
    return await kernel_settings.modified_pod(pod(), placement)


async def _start(
    settings: WarmPools,
    shapes: dict[str, Any],
    namespace: str,
    tracker_source: Any,
    kernel_pods: dict[str, Any],
    booked: Any = None,
    kernel_pod_for: Any = None,
) -> None:
    global _controller
    log = logging.getLogger("JupyterHub")
    try:
        tracker = tracker_source()
        if asyncio.iscoroutine(tracker):
            tracker = await tracker
        from kubernetes_asyncio.client import CustomObjectsApi, SchedulingV1Api

        from jupyter_gpuburst.hub.sites.offloading import NamespaceOffloader

        api_client = tracker.api.api_client
        offloader = NamespaceOffloader(CustomObjectsApi(api_client), log)
        _controller = PoolController(
            settings,
            shapes,
            namespace,
            tracker.api,
            SchedulingV1Api(api_client),
            tracker,
            log,
            offloader=offloader,
            kernel_pods=kernel_pods,
            booked=booked,
            kernel_pod_for=kernel_pod_for,
        )
        _controller.start()
        kernelsites.follow(_controller.kernel_pools)
        on = ", ".join(
            f"{p.count} x {p.profile}{' kernels' if p.kind == KERNELS else ''} on {p.site}"
            + (f" ({', '.join(w.text for w in p.schedule)} {settings.timezone})" if p.schedule else "")
            for p in settings.pool_list()
        )
        if on:
            log.info("Warm pools on: %s", on)
    except Exception:
        log.exception("Warm pools could not start; spawns go on without them")


def report() -> list[dict[str, Any]]:
    """Each pool's target, ready and pending placeholders, the GPUs they hold and have held."""
    return _controller.report() if _controller is not None else []


async def stop() -> None:
    global _controller
    if _controller is not None:
        kernelsites.follow(None)
        await _controller.stop()
        _controller = None
