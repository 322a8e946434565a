"""GPUBurstSpawner without a cluster: a tracker with synthetic nodes, a spawner over it, and the
pod manifest it builds, serialized as the API server would receive it."""

from __future__ import annotations

import asyncio
from typing import Any

from kubernetes_asyncio.client import ApiClient, ApiException
from traitlets.config import Config

from jupyter_gpuburst.bench import synthetic
from jupyter_gpuburst.hub.capacity.tracker import CapacityTracker
from jupyter_gpuburst.hub.settings import settings_from_config
from jupyter_gpuburst.hub.sites.offloading import NamespaceOffloader
from jupyter_gpuburst.hub.spawner import GPUBurstSpawner

SERIALIZER = object.__new__(ApiClient)  # serialization needs no connection
KUBESPAWNER_LABELS = {"component": "singleuser-server", "app.kubernetes.io/managed-by": "kubespawner"}
PROFILES = [
    {"display_name": "CPU", "slug": "cpu", "default": True},
    {"display_name": "1 GPU", "slug": "gpu1", "kubespawner_override": {"extra_resource_limits": {"nvidia.com/gpu": "1"}}},
    {"display_name": "4 GPUs", "slug": "gpu4", "gpuburst": {"count": 4}},
    {"display_name": "Donor only", "slug": "donor", "gpuburst": {"count": 1, "allowed_sites": ["donor-1"]}},
]


class FakeCustomApi:
    def __init__(self, status: int | None = None, exists: bool = False) -> None:
        self.status = status
        self.exists = exists
        self.created: list[dict[str, Any]] = []

    async def create_namespaced_custom_object(self, group, version, namespace, plural, body):
        if self.status:
            raise ApiException(status=self.status)
        self.created.append(body)
        return body

    async def get_namespaced_custom_object(self, group, version, namespace, plural, name):
        if not self.exists:
            raise ApiException(status=404)
        return {}


class FakeCoreApi:
    api_client = SERIALIZER


def make_tracker(local_free_nodes=({"origin-gpu": 2},), donor_gpus: int = 8, config: Config | None = None) -> CapacityTracker:
    tracker = CapacityTracker(None, settings_from_config(config))
    for nodes in local_free_nodes:
        for name, gpus in nodes.items():
            tracker._on_node_event("ADDED", synthetic.node(name, {"nvidia.com/gpu": gpus}))
    tracker._on_node_event("ADDED", synthetic.node("origin-cpu", {}))
    if donor_gpus:
        tracker._on_node_event("ADDED", synthetic.node("donor-1", {"nvidia.com/gpu": donor_gpus}, cluster_id="donor-1"))
    tracker.ready = True
    return tracker


def make_spawner(
    tracker: CapacityTracker, options: dict | None = None, offloader: NamespaceOffloader | None = None, **traits
) -> GPUBurstSpawner:
    config = Config()
    config.GPUBurstSpawner.profile_list = PROFILES
    for name, value in traits.items():
        config.GPUBurstSpawner[name] = value
    spawner = GPUBurstSpawner(_mock=True, config=config)
    spawner.user_options = options or {}
    spawner._gb_tracker = tracker
    tracker.own_namespace(spawner.namespace)
    GPUBurstSpawner._offloaders[id(asyncio.get_running_loop())] = offloader or NamespaceOffloader(FakeCustomApi())
    return spawner


async def manifest_of(spawner: GPUBurstSpawner) -> dict[str, Any]:
    await spawner.load_user_options()
    pod = await spawner.get_pod_manifest()
    return SERIALIZER.sanitize_for_serialization(pod)


def required_terms(manifest):
    return manifest["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


def env(manifest) -> dict[str, Any]:
    return {e["name"]: e for e in manifest["spec"]["containers"][0]["env"]}
