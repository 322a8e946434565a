"""MIG slices are the devices; each slice's utilization comes from GPM where its GPU has it, and
where it has not, the slice says so (NVML faked: no MIG GPU was at hand to test this on)."""

from __future__ import annotations

import pytest

from jupyter_gpuburst.gpu.nvml import MIG_UTILIZATION_NOTE
from jupyter_gpuburst.gpu.select import open_backend
from jupyter_gpuburst.gpu.testing import FakeGPU, FakeMIG, FakeNVML

GiB = 1 << 30
H100 = "NVIDIA H100 80GB HBM3"


def slices(*utils: float) -> list[FakeMIG]:
    return [FakeMIG(f"MIG-{i}", f"{H100} MIG 1g.10gb", GiB, 10 * GiB, i, sm_util_percent=u) for i, u in enumerate(utils, start=1)]


def test_gpm_gives_each_slice_its_own_utilization_from_two_samples(monkeypatch):
    fake = FakeNVML(gpus=[FakeGPU("GPU-h100", H100, gpm=True, mig=slices(42.0, 0.0))]).install(monkeypatch.setattr)
    backend = open_backend("nvml")
    first = backend.read_devices([], 0.0)
    assert [r.uuid for r in first] == ["MIG-1", "MIG-2"]  # the slices are the devices, not their GPU
    # GPM needs two samples: the first read has none to compare with, and says so
    assert [(r.utilization, r.utilization_note) for r in first] == [(None, MIG_UTILIZATION_NOTE)] * 2
    second = backend.read_devices([], 1.0)
    assert [(r.uuid, r.utilization, r.utilization_note) for r in second] == [("MIG-1", 0.42, None), ("MIG-2", 0.0, None)]
    fake.gpus[0].mig[1].sm_util_percent = 97.0
    assert backend.read_devices([], 2.0)[1].utilization == pytest.approx(0.97)
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == 0  # not supported under MIG: never asked
    backend.close()
    assert fake.gpm_samples == 0  # every GPM sample freed


def test_a_gpu_without_gpm_leaves_its_slices_utilization_unread_with_the_note(monkeypatch):
    fake = FakeNVML(gpus=[FakeGPU("GPU-a100", "NVIDIA A100-SXM4-40GB", gpm=False, mig=slices(50.0))]).install(monkeypatch.setattr)
    backend = open_backend("nvml")
    for now in (0.0, 1.0):
        (reading,) = backend.read_devices([], now)
        assert (reading.utilization, reading.utilization_note) == (None, MIG_UTILIZATION_NOTE)
    assert fake.calls["nvmlGpmSampleAlloc"] == 0
    backend.close()
