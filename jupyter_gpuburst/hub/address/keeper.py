"""Keeps the hub's address (``manifests``) in the user namespace while the hub runs.

The hub writes them itself because only it knows where it runs: its pod's IP changes with each
restart, and a stale endpoint would send every server's calls, on the origin and on each donor,
to an address that is no longer the hub. They are written at start and checked again every
``interval`` seconds (someone may delete them; nothing else changes them). They outlive the hub
on purpose: servers keep running across a hub restart, and the next hub rewrites the address.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
from collections.abc import Awaitable, Callable
from typing import Any

from kubernetes_asyncio.client import ApiException
from traitlets import Dict, Float, Int, TraitError, Unicode, default, validate
from traitlets.config import Configurable

from jupyter_gpuburst.core.keys import HUB_POD_IP_ENV, SERVICE_PORT_ENV
from jupyter_gpuburst.core.keys import SERVICE_PORT as GPUBURST_PORT
from jupyter_gpuburst.hub.address.manifests import endpoint_slice, service
from jupyter_gpuburst.hub.kernels.settings import spawner_setting

log = logging.getLogger(__name__)
HUB_PORT = 8081


class HubAddress(Configurable):
    """The hub's address in the user namespace, for servers on the origin and on donors."""

    service_name = Unicode(
        "hub",
        config=True,
        help="""Name of the Service (and its EndpointSlice) the hub keeps in the user namespace,
        leading to its own pod. hub_connect_url names it by its short name, http://<name>:8081:
        in the user namespace (and in its copy on each donor, where Liqo reflects it under the same
        name) it is this Service; in the hub's namespace, z2jh's own hub Service.""",
    )
    namespace = Unicode(
        "",
        config=True,
        help="Namespace of the Service: the user servers' (empty: the spawner's namespace).",
    )
    pod_ip = Unicode(
        config=True,
        help=f"""The hub pod's IP, the Service's endpoint (default: ${HUB_POD_IP_ENV}, set from the
        downward API's status.podIP). Empty: the hub keeps no address (a hub outside the cluster,
        whose hub_connect_url names an address of its own).""",
    )
    ports = Dict(
        value_trait=Int(),
        config=True,
        help="""Ports of the Service by name: the hub's API and the gpuburst service in the hub
        pod (the same numbers on the pod; hub_connect_url and GPUBURST_SERVICE_PORT use them).""",
    )
    interval = Float(60.0, config=True, help="Seconds between checks that the Service and its EndpointSlice are as written.")

    @default("pod_ip")
    def _pod_ip_from_env(self) -> str:
        return os.environ.get(HUB_POD_IP_ENV, "")

    @default("ports")
    def _default_ports(self) -> dict[str, int]:
        return {"hub": HUB_PORT, "gpuburst": int(os.environ.get(SERVICE_PORT_ENV) or GPUBURST_PORT)}

    @validate("pod_ip")
    def _check_ip(self, proposal: Any) -> str:
        value = proposal["value"].strip()
        if value:
            try:
                ipaddress.ip_address(value)
            except ValueError:
                raise TraitError(f"HubAddress.pod_ip: {value!r} is not an IP address") from None
        return value

    @validate("ports")
    def _check_ports(self, proposal: Any) -> dict[str, int]:
        ports = proposal["value"]
        if not ports:
            raise TraitError("HubAddress.ports: at least the hub's port")
        for name, port in ports.items():
            if not 1 <= port <= 65535:
                raise TraitError(f"HubAddress.ports: {name}={port} is not a port (1-65535)")
        return ports

    @validate("interval")
    def _check_interval(self, proposal: Any) -> float:
        if proposal["value"] <= 0:
            raise TraitError("HubAddress.interval: seconds, more than 0")
        return proposal["value"]


class AddressKeeper:
    """Writes the Service and EndpointSlice of ``settings`` in ``namespace`` through the hub's
    Kubernetes clients (``core_api``: CoreV1Api, ``discovery_api``: DiscoveryV1Api)."""

    def __init__(self, settings: HubAddress, namespace: str, core_api: Any, discovery_api: Any, logger: logging.Logger | None = None):
        self.settings = settings
        self.namespace = namespace
        self.core = core_api
        self.discovery = discovery_api
        self.log = logger or log

    async def ensure(self) -> list[str]:
        """Create what is missing and correct what differs; what it changed, as 'verb kind'."""
        name, ns, ports = self.settings.service_name, self.namespace, self.settings.ports
        changed = []
        svc = service(name, ns, ports)
        current = await self._read(self.core.read_namespaced_service, name)
        if current is None:
            await self.core.create_namespaced_service(ns, svc)
            changed.append("created Service")
        elif current.get("spec", {}).get("selector") or _ports(current) != _ports(svc):
            # a selector would make the control plane's endpoints replace ours
            svc["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            svc["spec"]["clusterIP"] = current["spec"].get("clusterIP")
            await self.core.replace_namespaced_service(name, ns, svc)
            changed.append("replaced Service")
        eps = endpoint_slice(name, ns, self.settings.pod_ip, ports)
        current = await self._read(self.discovery.read_namespaced_endpoint_slice, name)
        if current is None:
            await self.discovery.create_namespaced_endpoint_slice(ns, eps)
            changed.append("created EndpointSlice")
        elif any(current.get(k) != eps[k] for k in ("addressType", "endpoints", "ports")):
            # a restarted hub's pod has a new IP: the common case
            eps["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            await self.discovery.replace_namespaced_endpoint_slice(name, ns, eps)
            changed.append("replaced EndpointSlice")
        return changed

    async def _read(self, read: Callable[..., Awaitable[Any]], name: str) -> dict[str, Any] | None:
        try:
            obj = await read(name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return self.core.api_client.sanitize_for_serialization(obj)

    async def run(self) -> None:
        """``ensure`` now and every ``interval`` seconds until cancelled; a refusal is logged
        with what to grant, and tried again."""
        where = f"{self.settings.service_name} in {self.namespace}"
        while True:
            try:
                for change in await self.ensure():
                    self.log.info("hub address: %s %s -> %s", change, where, self.settings.pod_ip)
            except ApiException as exc:
                hint = " (apply hub_config/rbac.yaml: the hub writes services and endpointslices there)" if exc.status == 403 else ""
                self.log.warning("hub address: cannot keep %s: %s %s%s", where, exc.status, exc.reason, hint)
            except (OSError, asyncio.TimeoutError) as exc:
                self.log.warning("hub address: cannot keep %s: %s", where, exc)
            await asyncio.sleep(self.settings.interval)


def _ports(svc: dict[str, Any]) -> list[tuple[Any, Any, Any]]:
    return sorted((p.get("name"), p.get("port"), p.get("targetPort", p.get("port"))) for p in svc.get("spec", {}).get("ports") or [])


_task: asyncio.Task | None = None


def start_with_hub(c: Any) -> asyncio.Task | None:
    """At hub start (``install(c)``): keep the address from the hub's whole config, where the hub
    knows its pod's IP; None where it does not."""
    global _task
    from jupyterhub.app import JupyterHub

    config = JupyterHub.instance().config if JupyterHub.initialized() else c
    try:
        settings = HubAddress(config=config)
    except TraitError as exc:
        log.error("hub address: not kept, %s", exc)
        return None
    if not settings.pod_ip:
        if os.environ.get("KUBERNETES_SERVICE_HOST"):  # in a pod: servers in the user namespace resolve hub_connect_url there
            log.warning(
                "hub address: no %s (the downward API's status.podIP), so no Service %r in the user namespace",
                HUB_POD_IP_ENV,
                settings.service_name,
            )
        return None
    if _task is not None and not _task.done():
        return None
    from kubespawner.clients import load_config, shared_client

    from jupyter_gpuburst.hub.settings import api_settings_from_config

    api = api_settings_from_config(config)
    load_config(host=api["host"], ssl_ca_cert=api["ssl_ca_cert"], verify_ssl=api["verify_ssl"])
    namespace = settings.namespace or spawner_setting(config, "namespace", "") or "default"
    keeper = AddressKeeper(settings, namespace, shared_client("CoreV1Api"), shared_client("DiscoveryV1Api"))
    _task = asyncio.ensure_future(keeper.run())
    return _task
