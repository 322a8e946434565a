"""Make sure a namespace is offloaded through Liqo before its first pod goes to a donor.

Liqo only reflects pods of namespaces that have a NamespaceOffloading named ``offloading``. It
is created once per namespace and hub process (then cached), and an existing one, perhaps
managed by the cluster admin, is left as it is. Transient API failures are retried by the
client's REST layer (``hub.retry``); what still fails here is either the admin's to fix
(:class:`OffloadingPermissionError`, whose text is for the log) or the API server being away.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kubernetes_asyncio.client import ApiException

from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.hub import retry


class OffloadingPermissionError(RuntimeError):
    """The hub's service account may not create the NamespaceOffloading it needs."""


class NamespaceOffloader:
    """Creates each namespace's NamespaceOffloading at most once per process."""

    def __init__(self, custom_api: Any, log: logging.Logger | None = None) -> None:
        self.api = custom_api
        self.log = log or logging.getLogger(__name__)
        api_client = getattr(custom_api, "api_client", None)
        if api_client is not None and getattr(api_client, "rest_client", None) is not None:
            retry.install(api_client, logger=self.log)
        self._done: set[str] = set()
        self._locks: dict[str, asyncio.Lock] = {}

    def manifest(self, namespace: str, cluster_ids: list[str] | None = None, strategy: str = "LocalAndRemote") -> dict[str, Any]:
        return liqo.namespace_offloading(namespace, strategy, cluster_ids)

    async def ensure(self, namespace: str, cluster_ids: list[str] | None = None, strategy: str = "LocalAndRemote") -> bool:
        """Make sure ``namespace`` is offloaded (to ``cluster_ids`` only, when given); True when
        this call created the object."""
        if namespace in self._done:
            return False
        lock = self._locks.setdefault(namespace, asyncio.Lock())
        async with lock:
            if namespace in self._done:
                return False
            created = await self._create(namespace, self.manifest(namespace, cluster_ids, strategy))
            self._done.add(namespace)
            return created

    async def _create(self, namespace: str, body: dict[str, Any]) -> bool:
        try:
            await self.api.create_namespaced_custom_object(
                group=liqo.OFFLOADING_GROUP,
                version=liqo.OFFLOADING_VERSION,
                namespace=namespace,
                plural=liqo.NAMESPACE_OFFLOADING_PLURAL,
                body=body,
            )
            self.log.info("Offloaded namespace %s through Liqo", namespace)
            return True
        except ApiException as exc:
            if exc.status == 409:
                return False
            if exc.status == 403:
                if await self._exists(namespace):
                    return False
                raise OffloadingPermissionError(
                    f"the hub may not offload namespace {namespace!r} to donor clusters: grant its "
                    f"service account 'create {liqo.NAMESPACE_OFFLOADING_PLURAL}.{liqo.OFFLOADING_GROUP} "
                    f"in namespace {namespace}', or create the NamespaceOffloading "
                    f"{liqo.NAMESPACE_OFFLOADING_NAME!r} there yourself"
                ) from None
            if exc.status == 404:
                raise OffloadingPermissionError(
                    f"the API server does not know {liqo.NAMESPACE_OFFLOADING_PLURAL}.{liqo.OFFLOADING_GROUP}: "
                    "is Liqo installed on the origin cluster?"
                ) from None
            raise

    async def _exists(self, namespace: str) -> bool:
        try:
            await self.api.get_namespaced_custom_object(
                group=liqo.OFFLOADING_GROUP,
                version=liqo.OFFLOADING_VERSION,
                namespace=namespace,
                plural=liqo.NAMESPACE_OFFLOADING_PLURAL,
                name=liqo.NAMESPACE_OFFLOADING_NAME,
            )
            return True
        except ApiException:
            return False
