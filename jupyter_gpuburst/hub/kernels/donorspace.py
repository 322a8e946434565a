"""The namespace of one donor's GPU kernels: made if missing, offloaded through Liqo to that donor only.

Liqo reflects every Secret of an offloaded namespace to every donor the namespace is offloaded
to. The server's namespace is offloaded to every donor (servers burst to any of them), so a
donor kernel's Secret there would reach every donor's admin. In a namespace whose
NamespaceOffloading selects one donor, the Secret reaches the cluster its pod runs on, and only
that one (``manifests.kernel_namespace`` names it).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from kubernetes_asyncio.client import ApiException

from jupyter_gpuburst.core import podsecurity
from jupyter_gpuburst.hub.sites.offloading import NamespaceOffloader


def server_namespace(server_pod: dict[str, Any] | None, default: str) -> str:
    """The namespace of the user's server (the hub's user namespace when it is not known)."""
    return ((server_pod or {}).get("metadata") or {}).get("namespace") or default


class DonorNamespaces:
    """Makes each donor kernel namespace, and its one-donor offloading, at most once per process."""

    def __init__(self, core_api: Any, offloader: NamespaceOffloader, log: logging.Logger | None = None) -> None:
        self.api = core_api
        self.offloader = offloader
        self.log = log or logging.getLogger(__name__)
        self._done: set[str] = set()
        self._locks: dict[str, asyncio.Lock] = {}

    async def ensure(self, namespace: str, cluster_id: str) -> None:
        if namespace in self._done:
            return
        async with self._locks.setdefault(namespace, asyncio.Lock()):
            if namespace in self._done:
                return
            await self._create(namespace, cluster_id)
            # an admin's own offloading is left as it is (doctor says whether it selects one donor)
            await self.offloader.ensure(namespace, cluster_ids=[cluster_id], strategy="Remote")
            self._done.add(namespace)

    async def _create(self, namespace: str, cluster_id: str) -> None:
        # kernels only: the Pod Security admission refuses any pod less than restricted there
        body = {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": namespace, "labels": dict(podsecurity.KERNEL_NAMESPACE_LABELS)},
        }
        try:
            await self.api.create_namespace(body)
            self.log.info("Created namespace %s for GPU kernels on donor %s", namespace, cluster_id)
        except ApiException as exc:
            if exc.status == 409:
                return
            if exc.status == 403:
                # RBAC answers before the namespace's existence: one an admin made (docs/install.md)
                # is used as it is, and creating the kernel's pod there says if it is missing
                self.log.debug("The hub may not create namespaces; %s is taken as made by an admin", namespace)
                return
            raise
