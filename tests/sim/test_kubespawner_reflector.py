"""KubeSpawner's own reflectors (unmodified) keep their view of pods and events current."""

from __future__ import annotations

import asyncio

import kubernetes_asyncio
import pytest
from kubespawner.reflector import NamespacedResourceReflector
from kubespawner.spawner import EventReflector, PodReflector

from jupyter_gpuburst.sim.testing import wait_until


class NamespacedPodReflector(PodReflector, NamespacedResourceReflector):
    """The combination KubeSpawner builds for a single-namespace hub."""


class NamespacedEventReflector(EventReflector, NamespacedResourceReflector):
    pass


@pytest.fixture
def kubespawner_client_config(apiserver):
    """Point kubernetes_asyncio's global configuration (what KubeSpawner uses) at the emulator."""
    previous = kubernetes_asyncio.client.Configuration.get_default_copy()
    config = kubernetes_asyncio.client.Configuration(host=apiserver.url)
    kubernetes_asyncio.client.Configuration.set_default(config)
    yield
    kubernetes_asyncio.client.Configuration.set_default(previous)


async def test_pod_and_event_reflectors(apiserver, kubespawner_client_config):
    store = apiserver.store
    store.create(
        "pods",
        {
            "metadata": {"name": "jupyter-old", "labels": {"component": "singleuser-server"}},
            "spec": {"containers": [{"name": "notebook", "image": "x:1"}]},
        },
    )
    pods = NamespacedPodReflector(namespace="default", labels={"component": "singleuser-server"})
    events = NamespacedEventReflector(namespace="default", fields={"involvedObject.kind": "Pod"})
    await pods.start()
    await events.start()
    try:
        await asyncio.wait_for(pods.first_load_future, 5)
        assert set(pods.pods) == {"default/jupyter-old"}
        new = store.create(
            "pods",
            {
                "metadata": {"name": "jupyter-new", "labels": {"component": "singleuser-server"}},
                "spec": {"containers": [{"name": "notebook", "image": "x:1"}]},
            },
        )
        store.create("pods", {"metadata": {"name": "unrelated"}, "spec": {"containers": [{"name": "c", "image": "x:1"}]}})
        store.bind_pod("default", "jupyter-new", "gpu-1")
        await wait_until(lambda: pods.pods.get("default/jupyter-new", {}).get("spec", {}).get("nodeName") == "gpu-1", 5.0)
        await wait_until(lambda: any(e["involvedObject"]["name"] == "jupyter-new" for e in events.events), 5.0)
        assert "default/unrelated" not in pods.pods
        store.delete("pods", "default", "jupyter-old")
        await wait_until(lambda: "default/jupyter-old" not in pods.pods, 5.0)
        assert pods.pods["default/jupyter-new"]["metadata"]["uid"] == new["metadata"]["uid"]
    finally:
        await pods.stop()
        await events.stop()
        for task in asyncio.all_tasks():
            if task.get_coro().__name__ == "close_client_task":
                task.cancel()
