"""``install(c)``: the hub-side additions, registered from ``jupyterhub_config.py`` in one line.

``install(c)`` gives the same hub wherever it stands in the config file: before or after the
feature settings (``c.GPUCullingSettings``, ``c.GPUAccountingSettings``, ``c.WarmPools``), as the pages of
docs/ and the examples in hub_config/ place them. What JupyterHub reads before any of our code
runs, the roles, is granted whatever the features (the ``gpuburst`` service may stop servers:
its token stays in the hub process); what can wait is decided once the hub runs, from its
whole config: whether the culler starts, whether the GPU-hours ledger counts held-idle time
(servers report GPU activity only where culling is configured, so elsewhere idle time stays
unknown, never a guessed 0), and which warm pools run (a bad pool stops the hub either way).
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from jupyterhub.app import JupyterHub

from jupyter_gpuburst.core.keys import SERVICE_HOST_ENV, SERVICE_PORT_ENV
from jupyter_gpuburst.core.keys import SERVICE_PORT as DEFAULT_SERVICE_PORT
from jupyter_gpuburst.hub import metrics  # noqa: F401 - /hub/metrics shows the series from hub start
from jupyter_gpuburst.hub.accounting import (
    counters,  # noqa: F401 - and the GPU-seconds counters
    use_idle_source,
)
from jupyter_gpuburst.hub.address import start_with_hub as start_address
from jupyter_gpuburst.hub.capacity.tracker import CapacityTracker
from jupyter_gpuburst.hub.culling.live import idle_since
from jupyter_gpuburst.hub.culling.live import install as install_culling
from jupyter_gpuburst.hub.culling.live import start_with_hub as start_culler
from jupyter_gpuburst.hub.kernels.scopes import install as install_kernels
from jupyter_gpuburst.hub.labs.live import book as lab_book
from jupyter_gpuburst.hub.labs.live import booked_pools
from jupyter_gpuburst.hub.labs.live import install as install_labs
from jupyter_gpuburst.hub.pools.live import install as install_pools
from jupyter_gpuburst.hub.ports import free_port
from jupyter_gpuburst.hub.profiles.policy import check_profiles
from jupyter_gpuburst.hub.service import SERVICE_NAME, CapacityService
from jupyter_gpuburst.hub.settings import spawner_sections

TEMPLATES = str(Path(__file__).with_name("templates"))


def install(
    c: Any,
    tracker_source: Any = None,
    service_port: int | None = None,
    service_host: str | None = None,
    registry_source: Any = None,
) -> None:
    """Register the ``gpuburst`` service (capacity page and API, GPU kernel API), the spawn
    page's template, the kernel scope, and check the profiles.

    ``c`` is the config object of ``jupyterhub_config.py``; call ``install(c)`` after setting
    ``hub_connect_url``, ``base_url`` and the profiles; feature settings may come before or after
    it (the module's docstring says why). The service's HTTP server runs in the hub process (hub/service.py says
    why), on ``service_port`` (default: $GPUBURST_SERVICE_PORT, else 8082; a free port when the hub
    is reached on loopback), reached by the proxy and by users' servers at ``service_host``
    (default: $GPUBURST_SERVICE_HOST, else the host of ``hub_connect_url``, else 127.0.0.1).
    ``tracker_source()`` may replace the hub's shared
    ``CapacityTracker`` and ``registry_source(hub)`` the kernel registry (tests). Calling it twice
    changes nothing.

    Kernel mode needs nothing more here: the kernel API is part of the service, and servers'
    tokens may carry its scopes (``jupyter_gpuburst.hub.kernels.install``); who may start GPU
    kernels is the admin's role (docs/kernels.md).

    Raises ``ProfilePolicyError`` (the hub does not start) when a profile's
    ``kubespawner_override`` sets a placement trait that can only be set hub-wide.
    """
    # A profile that sets a hub-wide placement trait stops the hub here, at start, with the reason
    for section in ["KubeSpawner", *spawner_sections(c)]:
        if section in c and "profile_list" in c[section]:
            check_profiles(c[section]["profile_list"])

    hub = c.JupyterHub
    # appended, so an admin's own template directories can still override ours: spawn_pending.html
    # pins the placement decision above the progress bar
    template_paths = _configured(hub, "template_paths")
    if TEMPLATES not in template_paths:
        template_paths.append(TEMPLATES)
    hub.template_paths = template_paths
    install_kernels(c, SERVICE_NAME)
    install_culling(c, SERVICE_NAME)
    services = list(hub.services) if "services" in hub else []
    if any(s.get("name") == SERVICE_NAME for s in services):
        return
    install_labs(c, tracker_source or _hub_tracker)
    install_pools(c, tracker_source or _hub_tracker, booked=booked_pools)
    host = service_host or os.environ.get(SERVICE_HOST_ENV) or urlparse(hub.get("hub_connect_url") or "").hostname or "127.0.0.1"
    bind = _bind_address(host)
    local = bind != "0.0.0.0"
    port = service_port or int(os.environ.get(SERVICE_PORT_ENV, 0)) or (free_port(bind) if local else DEFAULT_SERVICE_PORT)
    service = CapacityService(tracker_source or _hub_tracker, bind, port, host, registry_source, hub.get("base_url") or "/")
    service.lab_book_source = lab_book
    hub.services = services + [service.register()]
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return  # the config is only being read (not by a starting hub): no server
    # JupyterHub loads its config inside its running event loop, which then serves the hub
    loop.call_soon(service.start)
    # by the time the loop runs these, the whole config file has been read
    loop.call_soon(wire_idle_source, c)
    # servers on donors reach the hub by a name Liqo reflects (hub/address)
    loop.call_soon(start_address, c)
    start_culler(c, service)


def counts_idle(config: Any) -> bool:
    """Whether the GPU-hours ledger counts held-idle time under ``config``: servers report their
    GPU activity only where culling is configured (it may stay off)."""
    return "GPUCullingSettings" in config


def wire_idle_source(c: Any) -> None:
    """At hub start: the ledger's idle source, from the hub's whole config (``c`` and the hub's
    own, which includes every file and option it read)."""
    hub_config = JupyterHub.instance().config if JupyterHub.initialized() else c
    if counts_idle(c) or counts_idle(hub_config):
        use_idle_source(idle_since)


def _bind_address(host: str) -> str:
    """Where the service listens when reached at ``host``: a loopback host on loopback only (a
    127.x address as itself: pods in network namespaces of their own reach the host at one other
    than 127.0.0.1), any other host on every address."""
    if host == "localhost":
        return "127.0.0.1"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return "0.0.0.0"
    if not address.is_loopback:
        return "0.0.0.0"
    return host if address.version == 4 else "127.0.0.1"


async def _hub_tracker() -> Any:
    """The hub process's one tracker, from the hub's merged config (GPUBurstSpawner traits)."""
    hub_app = JupyterHub.instance()
    return await CapacityTracker.ensure(hub_app.config, hub_app.log)


def _configured(section: Any, name: str) -> list:
    """A list trait's configured value; unset ones read as traitlets' lazy values, not lists."""
    if name in section:
        value = section[name]
        if isinstance(value, list | tuple):
            return list(value)
        # e.g. `c.JupyterHub.template_paths.append(...)` earlier: a lazy value with additions
        return list(value.get_value([]))
    return []
