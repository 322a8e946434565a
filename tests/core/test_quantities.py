"""Quantities and pod requests in placement units, by Kubernetes' rules."""

from __future__ import annotations

import pytest

from jupyter_gpuburst.core.quantities import canonical, describe, pod_requests

GPU = "nvidia.com/gpu"


def counted(resource: str) -> bool:
    return resource in ("cpu", "memory", "ephemeral-storage", "pods") or resource == GPU


def container(requests=None, limits=None, **extra):
    resources = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": "c", "image": "x", "resources": resources, **extra}


@pytest.mark.parametrize(
    "resource, value, expected",
    [
        ("cpu", "500m", 500),
        ("cpu", "2", 2000),
        ("cpu", 0.5, 500),
        ("cpu", "0.1", 100),
        ("cpu", "1001u", 2),
        ("memory", "8Gi", 8 * 2**30),
        ("memory", "1.5Gi", 3 * 2**29),
        ("memory", "129e6", 129_000_000),
        ("memory", "128974848", 128974848),
        ("memory", "1k", 1000),
        ("ephemeral-storage", "10Gi", 10 * 2**30),
        ("pods", "110", 110),
        (GPU, "4", 4),
        (GPU, 2, 2),
    ],
)
def test_canonical_units_round_up_like_kubernetes(resource, value, expected):
    assert canonical(resource, value) == expected


@pytest.mark.parametrize(
    "resource, value",
    [("cpu", "lots"), ("memory", "8GB"), ("memory", "-1Gi"), (GPU, "1.5"), (GPU, "2Gi"), ("cpu", "1e99"), ("cpu", True)],
)
def test_malformed_negative_or_fractional_quantities_are_refused(resource, value):
    with pytest.raises(ValueError):
        canonical(resource, value)


def test_requests_default_to_limits_and_containers_add_up():
    spec = {
        "containers": [
            container(limits={"cpu": "2", "memory": "4Gi", GPU: "1"}),
            container(requests={"cpu": "500m"}, limits={"cpu": "1", "memory": "1Gi"}),
        ]
    }
    assert pod_requests(spec, counted) == {"cpu": 2500, "memory": 5 * 2**30, GPU: 1, "pods": 1}


def test_init_containers_run_alone_so_the_largest_counts_against_the_sum():
    spec = {
        "containers": [container(requests={"cpu": "1", "memory": "1Gi"})],
        "initContainers": [container(requests={"cpu": "4"}), container(requests={"memory": "512Mi"})],
    }
    assert pod_requests(spec, counted) == {"cpu": 4000, "memory": 2**30, "pods": 1}


def test_sidecars_run_beside_everything_started_after_them():
    spec = {
        "containers": [container(requests={"cpu": "1"})],
        "initContainers": [
            container(requests={"cpu": "500m"}, restartPolicy="Always"),  # a sidecar
            container(requests={"cpu": "2"}),  # runs with the sidecar: 2.5
        ],
    }
    assert pod_requests(spec, counted)["cpu"] == 2500
    spec["initContainers"][1]["resources"]["requests"]["cpu"] = "1"  # 1.5 < 1 + 0.5 sidecar
    assert pod_requests(spec, counted)["cpu"] == 1500


def test_runtime_class_overhead_is_added_and_untracked_resources_ignored():
    spec = {
        "containers": [container(requests={"cpu": "1", "example.com/fpga": "1"})],
        "overhead": {"cpu": "250m", "memory": "120Mi"},
    }
    assert pod_requests(spec, counted) == {"cpu": 1250, "memory": 120 * 2**20, "pods": 1}


def test_a_pod_without_requests_still_takes_a_pod_slot():
    assert pod_requests({"containers": [container()]}, counted) == {"pods": 1}


def test_amounts_read_as_words():
    assert describe("cpu", 8000) == "8 CPU"
    assert describe("cpu", 500) == "0.5 CPU"
    assert describe("memory", 16 * 2**30) == "16 GiB of memory"
    assert describe(GPU, 2) == "2 GPUs" and describe(GPU, 1) == "1 GPU"
    assert describe("nvidia.com/mig-1g.10gb", 1) == "1 MIG 1g.10gb slice"
