"""Which pods are this hub's user servers, and which are only GPUs in use by someone else.

The capacity tracker watches every pod of the cluster, because any pod can hold GPUs. Labels and
annotations are chosen by whoever creates a pod, so a pod in another tenant's namespace carrying
``gpuburst.jupyter.org/site`` and ``…/user=alice`` must not show as alice's server, nor end her
reservation. A pod is taken for one of the hub's servers only when both hold:

* its namespace is one the hub's spawners use (``KubeSpawner.namespace``; with
  ``enable_user_namespaces``, a name ``user_namespace_template`` can produce; on a donor, the
  same names as Liqo remaps them), a boundary the cluster's RBAC enforces; and
* it carries the labels KubeSpawner puts on the user pods it manages: ``component`` (its
  ``component_label``) and ``app.kubernetes.io/managed-by`` (from ``common_labels``), the same
  labels KubeSpawner's own pod reflector selects on.

The hub's own GPU kernel pods (``component=gpuburst-kernel``, made by the kernel registry) in an
owned namespace are taken too: they carry a reservation and a placement like a server's.

A pod is taken for one of the hub's warm pools' pods (room free to the next spawn, time the
pool's, not a user's) only in a namespace the hub puts pods in (an owned one, or
``WarmPools.namespace``): a pool label on a pod elsewhere is somebody's GPUs in use.

Every other pod is counted by the inventory as plain GPU usage and nothing more.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Mapping
from typing import Any

from jupyter_gpuburst.core import keys, liqo

SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
COMPONENT_LABEL = "component"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
# most specific section first: GPUBurstSpawner's settings override KubeSpawner's
SPAWNER_SECTIONS = ("GPUBurstSpawner", "KubeSpawner")
# a DNS label part a template field can expand to (KubeSpawner's safe slugs are of this form)
_FIELD = r"[a-z0-9]([a-z0-9-]*[a-z0-9])?"


def default_namespace() -> str:
    """KubeSpawner's default namespace: the hub pod's own, else ``default``."""
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE) as fh:
            return fh.read().strip() or "default"
    except OSError:
        return "default"


def template_pattern(template: str, hub_namespace: str) -> re.Pattern[str]:
    """A regex for the names ``template`` (KubeSpawner's ``user_namespace_template``) yields."""
    parts: list[str] = []
    for literal, field, _spec, _conv in string.Formatter().parse(template):
        parts.append(re.escape(literal))
        if field is None:
            continue
        parts.append(re.escape(hub_namespace) if field == "hubnamespace" else _FIELD)
    return re.compile("".join(parts))


def kernel_namespace_patterns(namespace: str, server_patterns: Iterable[re.Pattern[str]]) -> list[re.Pattern[str]]:
    """The names of donors' GPU kernel namespaces beside ``namespace`` and beside the names
    ``server_patterns`` match (``keys.KERNEL_NAMESPACE_INFIX``), whatever the donor.

    Owned from the hub's start: a restarted hub then counts the kernels running on donors in its
    ledger, and its capacity for them, from its first list of pods, not from whenever something
    first asks its kernel registry (which owned them, donor by donor, until then)."""
    servers = [re.escape(namespace), *(p.pattern for p in server_patterns)]
    return [re.compile(f"(?:{server}){re.escape(keys.KERNEL_NAMESPACE_INFIX)}{_FIELD}") for server in servers]


class PodOwnership:
    """Decides whether a pod is one of the hub's user servers."""

    def __init__(
        self,
        namespaces: Iterable[str] = ("default",),
        *,
        namespace_patterns: Iterable[re.Pattern[str]] = (),
        kernel_namespace_patterns: Iterable[re.Pattern[str]] = (),
        component: str = "singleuser-server",
        managed_by: str | None = "kubespawner",
        origin_cluster_id: str | None = None,
        pool_namespaces: Iterable[str] = (),
    ) -> None:
        self.pool_namespaces = frozenset(pool_namespaces)
        self.namespaces: set[str] = set()
        self.namespace_patterns = list(namespace_patterns)
        # kept apart: a hub whose RBAC lets it read one namespace's pods only (the tracker's
        # narrowed watch) has no donors' kernel namespaces to read either
        self.kernel_namespace_patterns = list(kernel_namespace_patterns)
        self.component = component
        self.managed_by = managed_by
        self.origin_cluster_id = origin_cluster_id
        for namespace in namespaces:
            self.add_namespace(namespace)

    @classmethod
    def from_config(cls, config: Any) -> "PodOwnership":
        """The rules for the spawner the hub's config sets up (KubeSpawner's defaults otherwise)."""

        def trait(name: str, default: Any) -> Any:
            for section in SPAWNER_SECTIONS:
                if config is not None and section in config and name in config[section]:
                    return config[section][name]
            return default

        namespace = trait("namespace", None) or default_namespace()
        patterns = []
        if trait("enable_user_namespaces", False):
            patterns.append(template_pattern(trait("user_namespace_template", "{hubnamespace}-{username}"), namespace))
        common = trait("common_labels", {MANAGED_BY_LABEL: "kubespawner"})
        managed_by = common.get(MANAGED_BY_LABEL) if isinstance(common, Mapping) else None
        pools = config["WarmPools"] if config is not None and "WarmPools" in config else {}
        # where hub/pools/live.py puts them (WarmPools.namespace's help says the same)
        pool_namespace = pools.get("namespace") or trait("namespace", None) or "default"
        pool_namespaces = [pool_namespace] if pools.get("pools") or pools.get("kernels") else []
        return cls(
            [namespace],
            namespace_patterns=patterns,
            kernel_namespace_patterns=kernel_namespace_patterns(namespace, patterns),
            component=trait("component_label", "singleuser-server"),
            managed_by=managed_by,
            pool_namespaces=pool_namespaces,
        )

    def add_namespace(self, namespace: str) -> bool:
        """Own ``namespace`` too (a spawner uses it); True when it was not owned before."""
        if not namespace or namespace in self.namespaces:
            return False
        self.namespaces.add(namespace)
        return True

    def owns_namespace(self, namespace: str | None) -> bool:
        if not namespace:
            return False
        if namespace in self.namespaces or any(p.fullmatch(namespace) for p in (*self.namespace_patterns, *self.kernel_namespace_patterns)):
            return True
        if self.origin_cluster_id:
            # a donor's copy of an offloaded pod lives in Liqo's remapped namespace
            return any(liqo.remote_namespace_name(ns, self.origin_cluster_id) == namespace for ns in self.namespaces)
        return False

    def owns_pool_namespace(self, namespace: str | None) -> bool:
        """Whether the hub's warm pools may have pods in ``namespace``."""
        return namespace in self.pool_namespaces or self.owns_namespace(namespace)

    def is_pool_pod(self, pod: Mapping[str, Any]) -> bool:
        """Whether ``pod`` is one of the hub's warm pools' pods (a placeholder or a waiting kernel)."""
        meta = pod.get("metadata") or {}
        return keys.POOL_LABEL in (meta.get("labels") or {}) and self.owns_pool_namespace(meta.get("namespace"))

    def owns(self, pod: Mapping[str, Any]) -> bool:
        """Whether ``pod`` is one of the hub's user servers (not merely a pod using GPUs)."""
        meta = pod.get("metadata") or {}
        if not self.owns_namespace(meta.get("namespace")):
            return False
        labels = meta.get("labels") or {}
        if labels.get(COMPONENT_LABEL) == keys.KERNEL_COMPONENT:
            # a GPU kernel pod the hub's kernel registry made beside the user's servers
            return True
        if labels.get(COMPONENT_LABEL) != self.component:
            return False
        return self.managed_by is None or labels.get(MANAGED_BY_LABEL) == self.managed_by
