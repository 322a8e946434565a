"""GET /api/gpuburst/gpus and /history with the simulated backend and a fake NVML."""

from __future__ import annotations

import asyncio
import json

import pynvml
import pytest

from jupyter_gpuburst.gpu.testing import FakeGPU, FakeMIG, FakeNVML
from jupyter_gpuburst.sim.testing import wait_until

GiB = 1 << 30
NVML_CONFIG = {"backend": "auto", "sampling_period_s": 0.1, "process_sampling_period_s": 0.2}
GPU_KEYS = {
    "index",
    "uuid",
    "name",
    "mig",
    "parent_uuid",
    "utilization",
    "utilization_note",
    "memory_used_bytes",
    "memory_total_bytes",
    "temperature_c",
    "power_w",
}


async def get_json(jp_fetch, *parts):
    response = await jp_fetch("api", "gpuburst", *parts)
    assert response.code == 200
    assert response.headers["Content-Type"].startswith("application/json")
    return json.loads(response.body)


async def test_simulated_gpus(jp_fetch):
    sample = await get_json(jp_fetch, "gpus")
    assert set(sample) == {
        "backend",
        "simulated",
        "available",
        "reason",
        "timestamp",
        "period_s",
        "gpus",
        "kernels",
        "unattributed",
    }
    assert (sample["backend"], sample["simulated"], sample["available"], sample["reason"]) == (
        "simulated",
        True,
        True,
        None,
    )
    assert sample["period_s"] == 0.1
    assert [g["index"] for g in sample["gpus"]] == [0, 1]
    for gpu in sample["gpus"]:
        assert set(gpu) == GPU_KEYS
        assert gpu["uuid"].startswith("GPU-") and gpu["mig"] is False
        assert 0.0 <= gpu["utilization"] <= 1.0
        assert gpu["memory_total_bytes"] == 40 * GiB
    assert sample["kernels"] == [] and sample["unattributed"] == []


@pytest.mark.parametrize("gpuburst_config", [NVML_CONFIG])
async def test_fake_nvml_two_gpus(jp_fetch, monkeypatch):
    FakeNVML(
        gpus=[
            FakeGPU("GPU-0000", utilization_percent=42, memory_used=3 * GiB, processes=[(4_000_001, 2 * GiB)]),
            FakeGPU("GPU-1111", utilization_percent=None),
        ]
    ).install(monkeypatch.setattr)
    sample = await get_json(jp_fetch, "gpus")
    assert (sample["backend"], sample["simulated"], sample["available"]) == ("nvml", False, True)
    first, second = sample["gpus"]
    assert (first["uuid"], first["utilization"], first["memory_used_bytes"]) == ("GPU-0000", 0.42, 3 * GiB)
    assert (first["temperature_c"], first["power_w"]) == (41, 61.5)
    assert second["utilization"] is None and second["utilization_note"]
    # No kernel owns pid 4000001: reported, honestly, as unattributed.
    assert sample["unattributed"] == [{"pid": 4_000_001, "gpu_uuid": "GPU-0000", "memory_used_bytes": 2 * GiB}]


@pytest.mark.parametrize("gpuburst_config", [NVML_CONFIG])
async def test_fake_nvml_mig(jp_fetch, monkeypatch):
    slices = [
        FakeMIG("MIG-aaaa", "NVIDIA A100-SXM4-40GB MIG 3g.20gb", 6 * GiB, 20 * GiB, 1, [(4_000_002, None)]),
        FakeMIG("MIG-bbbb", "NVIDIA A100-SXM4-40GB MIG 3g.20gb", 0, 20 * GiB, 2),
    ]
    FakeNVML(gpus=[FakeGPU("GPU-parent", mig=slices)]).install(monkeypatch.setattr)
    sample = await get_json(jp_fetch, "gpus")
    assert [(g["uuid"], g["mig"], g["parent_uuid"]) for g in sample["gpus"]] == [
        ("MIG-aaaa", True, "GPU-parent"),
        ("MIG-bbbb", True, "GPU-parent"),
    ]
    assert all(g["utilization"] is None for g in sample["gpus"])
    assert sample["gpus"][0]["utilization_note"] == "MIG slice without GPM: utilization unavailable"
    assert sample["gpus"][0]["memory_used_bytes"] == 6 * GiB
    assert sample["unattributed"] == [{"pid": 4_000_002, "gpu_uuid": "MIG-aaaa", "memory_used_bytes": None}]


@pytest.mark.parametrize("gpuburst_config", [NVML_CONFIG])
@pytest.mark.parametrize(
    ("fake", "reason"),
    [
        (FakeNVML(init_error=pynvml.NVMLError_LibraryNotFound), "no NVIDIA driver found (libnvidia-ml.so.1 missing)"),
        (
            FakeNVML(init_error=pynvml.NVMLError_DriverNotLoaded),
            "NVIDIA driver not loaded (no GPU attached to this server)",
        ),
        (FakeNVML(gpus=[]), "no GPU visible to this server (NVML found 0 devices)"),
        (FakeNVML(init_error=pynvml.NVMLError_Unknown), "NVML error: Unknown Error"),
    ],
    ids=["no-driver", "driver-not-loaded", "no-device", "nvml-error"],
)
async def test_no_gpu_visible(jp_fetch, monkeypatch, fake, reason):
    fake.install(monkeypatch.setattr)
    sample = await get_json(jp_fetch, "gpus")
    assert (sample["backend"], sample["available"], sample["simulated"]) == ("none", False, False)
    assert sample["reason"] == reason
    assert sample["gpus"] == [] and sample["unattributed"] == []


@pytest.mark.parametrize("gpuburst_config", [{**NVML_CONFIG, "backend": "none"}])
async def test_backend_none(jp_fetch):
    sample = await get_json(jp_fetch, "gpus")
    assert sample["available"] is False and "disabled" in sample["reason"]


@pytest.mark.parametrize(
    "gpuburst_config",
    [{"backend": "simulated", "sampling_period_s": 0.05, "process_sampling_period_s": 0.05, "history_length": 4}],
)
async def test_history_keeps_the_last_n(jp_fetch):
    first = await get_json(jp_fetch, "gpus")
    seen = {first["timestamp"]}

    async def five_more() -> bool:  # counted in samples, not seconds: a loaded machine samples late
        seen.add((await get_json(jp_fetch, "gpus"))["timestamp"])
        return len(seen) >= 6

    await wait_until(five_more, 30, "five more samples", interval=0.05)
    history = await get_json(jp_fetch, "history")
    assert history["period_s"] == 0.05
    stamps = [s["timestamp"] for s in history["samples"]]
    assert len(stamps) == 4 and stamps == sorted(stamps) and stamps[0] > first["timestamp"]
    assert all(s["simulated"] is True for s in history["samples"])


# A period far longer than the burst takes even on a busy machine: with 0.1 s, a loaded machine
# served the 30 requests over three periods and rightly took three samples.
@pytest.mark.parametrize(
    "gpuburst_config",
    [{"backend": "simulated", "sampling_period_s": 60, "process_sampling_period_s": 60, "freeze_heap_at_start": False}],
)
async def test_many_concurrent_requests_cost_one_sample(jp_fetch, jp_serverapp):
    bodies = await asyncio.gather(*(jp_fetch("api", "gpuburst", "gpus") for _ in range(30)))
    sampler = jp_serverapp.web_app.settings["gpuburst_sampler"]
    assert len({json.loads(b.body)["timestamp"] for b in bodies}) == 1
    assert sampler.stats.samples == 1


async def test_polling_does_not_count_as_activity(jp_fetch, jp_serverapp):
    settings = jp_serverapp.web_app.settings
    await jp_fetch("api", "contents")  # ordinary API use records activity
    before = settings.get("api_last_activity")
    assert before is not None
    await jp_fetch("api", "gpuburst", "gpus")
    await jp_fetch("api", "gpuburst", "placement")
    assert settings.get("api_last_activity") == before
