"""A server starts on the origin node that already has its image, not on an equally free node
that would pull it first (the 9:00 rush: a lab's first minutes went to image pulls)."""

from __future__ import annotations

import asyncio
import time

import pytest
from helpers.federation import SLEEPER, env_of, messages, pod_of

from jupyter_gpuburst.core import keys
from jupyter_gpuburst.sim.errors import ApiError
from jupyter_gpuburst.sim.testing import running_federation

pytestmark = pytest.mark.integration

IMAGE = "quay.io/jupyter/pytorch-notebook:cuda12-2024-10-07"
GPU_NODE = {"cpu": "16", "memory": "64Gi", "resources": {"nvidia.com/gpu": 2}}
# two origin GPU nodes alike (gpu-a comes first, so best fit alone takes it); no image is on
# any node until a pod pulls it, at 200 MiB/s (the default 100 MiB image: half a second)
CONFIG = {
    "origin": {
        "name": "origin",
        "nodes": [{"name": "gpu-a", **GPU_NODE}, {"name": "gpu-b", **GPU_NODE}, {"name": "origin-cpu"}],
        "image_pull_bandwidth": "200Mi",
        "preloaded_images": [],
    },
    "donors": [
        {"name": "donor-1", "nodes": [{"name": "donor-1-gpu", **GPU_NODE}], "grant": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": 2}}
    ],
}


@pytest.fixture
async def federation(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    async with running_federation(CONFIG, state_dir=tmp_path / "sim", kubeconfig=kubeconfig) as fed:
        fed.kubeconfig_path = kubeconfig
        yield fed


async def eventually(check, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


def reported_images(federation, node: str) -> list[str]:
    status = federation.origin.store.get("nodes", None, node).get("status") or {}
    return [name for image in status.get("images") or [] for name in image.get("names") or []]


async def warm(federation, node: str) -> None:
    """An earlier pod of the image ran on ``node``: the image stays there after it is gone."""
    store = federation.origin.store
    store.create("namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "others"}})
    spec = {"nodeName": node, "containers": [{"name": "c", "image": IMAGE, "command": SLEEPER}]}
    store.create("pods", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "earlier", "namespace": "others"}, "spec": spec})
    await eventually(lambda: IMAGE in reported_images(federation, node))
    store.delete("pods", "others", "earlier", grace_period_seconds=0)

    def gone() -> bool:
        try:
            store.get("pods", "others", "earlier")
        except ApiError:
            return True
        return False

    await eventually(gone)


async def test_a_server_starts_on_the_node_that_already_has_its_image(federation, start_hub):
    await warm(federation, "gpu-b")
    assert IMAGE not in reported_images(federation, "gpu-a")
    hub = await start_hub(f"c.KubeSpawner.image = {IMAGE!r}")
    status, body = await hub.spawn("dora", {"profile": "gpu1"})
    assert status in (201, 202), body  # 201: ready at once, nothing to pull
    await hub.wait_ready("dora")
    pod = pod_of(federation, "dora")
    assert pod["spec"]["nodeName"] == "gpu-b"
    # what the student reads in the Lab panel: why this node
    reason = "4 of 4 GPUs free on the origin; starting on the origin (node gpu-b, image already there)."
    assert env_of(pod)[keys.REASON_ENV]["value"] == reason
    events, _ = federation.origin.store.list("events", "default", field_selector="involvedObject.name=jupyter-dora")
    said = messages(events)
    assert f'Container image "{IMAGE}" already present on machine' in said, said
    assert not [m for m in said if m.startswith("Pulling image")], said
