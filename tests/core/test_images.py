"""Image names as placement compares them, and the images the inventory keeps per node."""

from __future__ import annotations

import pytest

from jupyter_gpuburst.bench import synthetic
from jupyter_gpuburst.core import images
from jupyter_gpuburst.core.inventory import Inventory

GPU = "nvidia.com/gpu"


@pytest.mark.parametrize(
    ("name", "normalized"),
    [
        # kube-scheduler's normalizedImageName: no tag means :latest
        ("quay.io/jupyter/base-notebook", "quay.io/jupyter/base-notebook:latest"),
        ("quay.io/jupyter/base-notebook:2024-10-07", "quay.io/jupyter/base-notebook:2024-10-07"),
        # a port is not a tag
        ("localhost:5000/notebook", "localhost:5000/notebook:latest"),
        ("registry.example.org:5000/lab/notebook:v1", "registry.example.org:5000/lab/notebook:v1"),
        # Docker Hub, as containerd and CRI-O report its images
        ("nginx", "docker.io/library/nginx:latest"),
        ("busybox:1.36", "docker.io/library/busybox:1.36"),
        ("jupyter/base-notebook", "docker.io/jupyter/base-notebook:latest"),
        ("docker.io/busybox", "docker.io/library/busybox:latest"),
        ("index.docker.io/library/busybox:1.36", "docker.io/library/busybox:1.36"),
        ("docker.io/library/busybox:1.36", "docker.io/library/busybox:1.36"),
        # a digest is complete without a tag
        ("busybox@sha256:" + "a" * 64, "docker.io/library/busybox@sha256:" + "a" * 64),
        ("quay.io/x/y:v1@sha256:" + "b" * 64, "quay.io/x/y:v1@sha256:" + "b" * 64),
        ("", ""),
    ],
)
def test_an_image_name_is_compared_fully_qualified(name, normalized):
    assert images.normalize(name) == normalized
    assert images.normalize(normalized) == normalized


def test_a_pods_images_are_its_containers_then_its_init_containers_each_once():
    spec = {
        "initContainers": [{"name": "net", "image": "quay.io/jupyterhub/k8s-network-tools:4.0.0"}, {"name": "x"}],
        "containers": [
            {"name": "notebook", "image": "quay.io/jupyter/pytorch-notebook:cuda12"},
            {"name": "sidecar", "image": "busybox"},
            {"name": "again", "image": "docker.io/library/busybox:latest"},
        ],
    }
    assert images.pod_images(spec) == (
        "quay.io/jupyter/pytorch-notebook:cuda12",
        "docker.io/library/busybox:latest",
        "quay.io/jupyterhub/k8s-network-tools:4.0.0",
    )
    assert images.pod_images({}) == ()


def node_with(name, listed):
    node = synthetic.node(name, {GPU: 4})
    node["status"]["images"] = listed
    return node


def test_the_inventory_keeps_the_images_a_node_reports_normalized():
    inv = Inventory()
    listed = [
        {"names": ["docker.io/library/busybox@sha256:" + "c" * 64, "busybox:1.36"], "sizeBytes": 4 * 2**20},
        {"names": ["quay.io/jupyter/pytorch-notebook"], "sizeBytes": 6 * 2**30},
        {"sizeBytes": 1},  # an image the runtime knows by no name
    ]
    inv.apply_node_event("ADDED", node_with("gpu-0", listed))
    inv.apply_node_event("ADDED", synthetic.node("gpu-1", {GPU: 4}))
    nodes = inv.snapshot().nodes
    assert nodes["gpu-0"].images == {
        "docker.io/library/busybox@sha256:" + "c" * 64,
        "docker.io/library/busybox:1.36",
        "quay.io/jupyter/pytorch-notebook:latest",
    }
    assert nodes["gpu-1"].images == frozenset()


@pytest.mark.parametrize("listed", [None, "busybox", [None, {"names": "busybox"}, {"names": [None, 3]}]])
def test_a_malformed_image_list_is_read_as_no_images(listed):
    inv = Inventory()
    inv.apply_node_event("ADDED", node_with("gpu-0", listed))
    assert inv.snapshot().nodes["gpu-0"].images == frozenset()


def test_nodes_that_report_the_same_images_share_one_set_and_keep_it_across_updates():
    inv = Inventory()
    listed = [{"names": ["quay.io/jupyter/pytorch-notebook:cuda12"], "sizeBytes": 6 * 2**30}]
    inv.apply_node_event("ADDED", node_with("gpu-0", listed))
    inv.apply_node_event("ADDED", node_with("gpu-1", [dict(i) for i in listed]))
    first = inv.snapshot()
    assert first.nodes["gpu-0"].images is first.nodes["gpu-1"].images
    # a heartbeat with the same list changes nothing: same node, same set, same version
    version = inv.version
    assert not inv.apply_node_event("MODIFIED", node_with("gpu-0", [dict(i) for i in listed]))
    assert inv.version == version and inv.snapshot().nodes["gpu-0"] is first.nodes["gpu-0"]
    # a pull is a change; the earlier snapshot keeps what it saw
    pulled = [*listed, {"names": ["busybox:1.36"], "sizeBytes": 4 * 2**20}]
    assert inv.apply_node_event("MODIFIED", node_with("gpu-0", pulled))
    assert "docker.io/library/busybox:1.36" in inv.snapshot().nodes["gpu-0"].images
    assert "docker.io/library/busybox:1.36" not in first.nodes["gpu-0"].images
    # a pod's change to the node keeps its images
    inv.apply_pod_event("ADDED", synthetic.pod("p", node_name="gpu-1", gpus={GPU: 1}))
    assert inv.snapshot().nodes["gpu-1"].images is first.nodes["gpu-1"].images
