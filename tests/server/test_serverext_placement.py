"""GET /api/gpuburst/placement from the env the spawner sets."""

from __future__ import annotations

import json
import socket

import pytest
from serverext_env import DONOR_ENV


async def test_standalone_without_spawner_env(jp_fetch):
    response = await jp_fetch("api", "gpuburst", "placement")
    assert response.code == 200
    assert response.headers["Content-Type"].startswith("application/json")
    assert json.loads(response.body) == {
        "managed": False,
        "site": "standalone",
        "site_kind": "standalone",
        "cluster": None,
        "node": socket.gethostname(),
        "reason": None,
        "gpu_resource": None,
        "gpu_count": None,
        "gpu_label": None,
        "storage": None,
    }


@pytest.mark.parametrize("gpuburst_env", [DONOR_ENV])
async def test_managed_on_a_donor(jp_fetch):
    body = json.loads((await jp_fetch("api", "gpuburst", "placement")).body)
    assert body == {
        "managed": True,
        "site": "polito-hpc",
        "site_kind": "donor",
        "cluster": "c0ffee-0000-4a4a",
        "node": "liqo-polito-hpc",
        "reason": "all 8 local A100s busy; 3 of 16 free on donor polito-hpc",
        "gpu_resource": "nvidia.com/gpu",
        "gpu_count": 2,
        "gpu_label": "2 GPUs",
        "storage": None,
    }


SCRATCH_MESSAGE = "This server runs on donor polito-hpc, but your home directory stays on the origin."


@pytest.mark.parametrize(
    "gpuburst_env",
    [
        {**DONOR_ENV, "JUPYTER_GPUBURST_STORAGE": "scratch", "JUPYTER_GPUBURST_STORAGE_MESSAGE": SCRATCH_MESSAGE},
        {**DONOR_ENV, "JUPYTER_GPUBURST_STORAGE": "elsewhere"},
    ],
    ids=["scratch", "unknown-kind"],
)
async def test_storage_outcome_reaches_the_panel(jp_fetch, gpuburst_env):
    body = json.loads((await jp_fetch("api", "gpuburst", "placement")).body)
    if gpuburst_env["JUPYTER_GPUBURST_STORAGE"] == "scratch":
        assert body["storage"] == {"kind": "scratch", "message": SCRATCH_MESSAGE}
    else:
        assert body["storage"] is None  # an unknown kind is not shown rather than guessed


@pytest.mark.parametrize(
    "gpuburst_env",
    [{"JUPYTER_GPUBURST_SITE": "origin", "JUPYTER_GPUBURST_NODE": "gpu-node-3", "JUPYTER_GPUBURST_GPU_COUNT": "many"}],
)
async def test_managed_on_the_origin_with_bad_count(jp_fetch):
    body = json.loads((await jp_fetch("api", "gpuburst", "placement")).body)
    assert (body["managed"], body["site"], body["site_kind"], body["node"]) == (True, "origin", "origin", "gpu-node-3")
    assert body["cluster"] is None and body["reason"] is None
    assert body["gpu_count"] is None  # not a number: not shown rather than guessed


@pytest.mark.parametrize(
    "gpuburst_env",
    [
        {
            "JUPYTER_GPUBURST_SITE": "origin",
            "JUPYTER_GPUBURST_NODE": "origin-cpu",
            "JUPYTER_GPUBURST_REASON": "No GPU requested: the server runs on the origin, on a CPU node.",
        }
    ],
)
async def test_cpu_only_server_started_by_the_hub_is_on_the_origin(jp_fetch):
    body = json.loads((await jp_fetch("api", "gpuburst", "placement")).body)
    assert (body["managed"], body["site_kind"], body["node"]) == (True, "origin", "origin-cpu")
    assert body["gpu_resource"] is None and body["gpu_label"] is None


@pytest.mark.parametrize(
    "gpuburst_env",
    [{"JUPYTER_GPUBURST_SITE": "origin", "JUPYTER_GPUBURST_GPU_RESOURCE": "nvidia.com/mig-1g.10gb", "JUPYTER_GPUBURST_GPU_COUNT": "1"}],
)
async def test_mig_slice_is_named_for_people(jp_fetch):
    body = json.loads((await jp_fetch("api", "gpuburst", "placement")).body)
    assert body["gpu_label"] == "1 MIG 1g.10gb slice"
    assert body["gpu_resource"] == "nvidia.com/mig-1g.10gb"  # the raw name stays as a detail
