"""The hub process's one culler: built from the hub's config on first use, stopping servers
through the hub's REST API (idle ones, and those of users whose GPU-hour budget is used up),
and what ``install(c)`` adds to the hub's config for it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from functools import partial
from typing import Any
from urllib.parse import quote

from jupyterhub.app import JupyterHub
from tornado.httpclient import AsyncHTTPClient, HTTPClientError

from jupyter_gpuburst.hub.accounting.gate import budget_of
from jupyter_gpuburst.hub.accounting.settings import GPUAccountingSettings
from jupyter_gpuburst.hub.capacity.tracker import CapacityTracker
from jupyter_gpuburst.hub.culling.budget import BudgetRule, BudgetWatch
from jupyter_gpuburst.hub.culling.culler import TEMPLATE_VAR, Culler
from jupyter_gpuburst.hub.culling.settings import GPUCullingSettings
from jupyter_gpuburst.hub.kernels.service import LiveHub, default_registry
from jupyter_gpuburst.hub.queue import ends as queue_ends

ROLE_NAME = "gpuburst-gpu-culler"
HUB_APPEARS_S = 60.0  # a hub is instantiated before it reads its config; later than this there is none
_culler: Culler | None = None


def hub_culler(service_token: str) -> Culler:
    """The hub process's culler, built from the hub's config on first use; its loop runs from
    then. It stops servers with the ``gpuburst`` service's token."""
    global _culler
    if _culler is None:
        hub = LiveHub()
        settings = GPUCullingSettings(config=hub.config)
        budgets = budget_watch(hub)
        _culler = Culler(
            settings,
            hub,
            default_registry,
            stop_server=partial(hub_api_stop, service_token),
            log=hub.log,
            budgets=budgets,
            servers=running_servers,
        )
        queue_ends.provide(_culler.session_ends)
        if _enabled_anywhere(settings):
            hub.log.info("GPU culling on: GPUs idle for %.0f s are given back, after a warning", settings.timeout_seconds)
        if budgets is not None:
            rule = budgets.rule
            hub.log.info(
                "GPU-hour budgets: running sessions over budget are warned%s",
                f", then stopped {rule.grace_s:.0f} s later" if rule.stop else " (not stopped: budget_stop is off)",
            )
        if _enabled_anywhere(settings) or budgets is not None:
            _culler.start()
    return _culler


def running_servers() -> list[tuple[str, str]]:
    """(user, server name) of every server the hub runs or starts, from its own spawners (the
    hub keeps every user with an active server in its cache of users)."""
    out = []
    for user in list(dict.values(JupyterHub.instance().users)):
        out.extend((user.name, name) for name, spawner in list(dict.items(user.spawners)) if spawner.active)
    return out


def budget_watch(hub: LiveHub) -> BudgetWatch | None:
    """The watch on running sessions' budgets, where the hub has budgets (else None)."""
    accounting = GPUAccountingSettings(config=hub.config)
    if not (accounting.enabled and accounting.has_budgets):
        return None

    async def status_of(user: str, groups: frozenset[str], admin: bool) -> object:
        # the tracker the spawner and the kernel API count with: one ledger for both
        return budget_of(await CapacityTracker.ensure(hub.config, hub.log), user, groups, admin)

    return BudgetWatch(BudgetRule(stop=accounting.budget_stop, grace_s=accounting.budget_grace_seconds), status_of, hub.log)


def _enabled_anywhere(settings: GPUCullingSettings) -> bool:
    overrides = [*settings.server_profiles.values(), *settings.kernel_profiles.values()]
    return settings.enabled or any(o.get("enabled") for o in overrides)


def wanted(config: Any) -> bool:
    """Whether ``config`` (the hub's whole config) has the culler run: GPU culling is
    configured, or budgets stop sessions."""
    return "GPUCullingSettings" in config or GPUAccountingSettings(config=config).stops_over_budget


def start_with_hub(c: Any, service: Any) -> None:
    """Build the culler, and with it start its loop, as soon as the hub has loaded its users,
    where culling or budget stops are configured: its targets are the hub's own spawners and
    kernel records, so it must not wait for a first report that a silenced server never sends.
    Whether it is configured is read then, from the hub's whole config: settings written after
    ``install(c)`` count as those before it."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return  # the config is only being read (not by a starting hub)
    source = service.culler_source or partial(hub_culler, service.token)
    loop.call_soon(lambda: asyncio.ensure_future(_start_when_hub_runs(source, c)))


async def _start_when_hub_runs(source: Callable[[], Culler], c: Any) -> None:
    # JupyterHub.instance() would make a hub where there is none (a program that only reads the
    # config in a running loop), and that singleton then refuses every other Jupyter application
    # in the process: wait for the hub to exist, and give up where none comes
    deadline = asyncio.get_running_loop().time() + HUB_APPEARS_S
    while not JupyterHub.initialized():
        if asyncio.get_running_loop().time() > deadline:
            return
        await asyncio.sleep(0.2)
    app = JupyterHub.instance()
    # the hub sets its tornado settings' users once its users are loaded, before its spawners
    while "users" not in app.tornado_settings:
        await asyncio.sleep(0.2)
    if wanted(app.config) or wanted(c):
        source()


def install(c: Any, service_name: str) -> None:
    """Let the spawn page say why a server was stopped (by the culler, or by an admin on the
    capacity page), and the service stop servers. The stop scope is granted whatever is
    configured yet: culling and budget settings may still follow ``install(c)`` in the config
    file, JupyterHub creates its roles before anything of ours runs, and only the culler, which
    starts where culling or budget stops are configured (``start_with_hub``), stops servers
    with it. The service's token never leaves the hub process, which may stop any server
    anyway."""
    if "GPUCullingSettings" in c:
        GPUCullingSettings(config=c)  # a wrong key or value stops the hub here, with the reason
    hub = c.JupyterHub
    template_vars = dict(hub.template_vars) if "template_vars" in hub else {}
    template_vars.setdefault(TEMPLATE_VAR, stopped_note)
    hub.template_vars = template_vars
    # the scopes jupyterhub-idle-culler needs to stop a server, and no more
    role = {
        "name": ROLE_NAME,
        "description": "Stop servers whose GPUs sat idle, or whose users' GPU-hour budget is used up (jupyter-gpuburst)",
        "services": [service_name],
        "scopes": ["read:users:name", "delete:servers"],
    }
    current = hub.load_roles if "load_roles" in hub else None
    if isinstance(current, list | tuple):
        if not any(r.get("name") == ROLE_NAME for r in current):
            hub.load_roles = [*current, role]
        return
    # unset, or `c.JupyterHub.load_roles.append(...)` before us: stay an addition (a lazy value),
    # so that roles set elsewhere (a file that loads this one with load_subconfig) are kept
    # (its to_dict(), not get_value(): that fixes the value, and later additions would be lost)
    added = current.to_dict() if current is not None else {}
    named = [*added.get("extend", []), *(r for _, r in added.get("inserts", []))]
    if any(isinstance(r, dict) and r.get("name") == ROLE_NAME for r in named):
        return
    hub.load_roles.append(role)


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
