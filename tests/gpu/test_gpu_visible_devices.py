"""The NVML backend reads only the devices NVIDIA_VISIBLE_DEVICES gives the server (NVML faked):
on a host shared by emulated pods, a server sees its own GPU, never its neighbour's."""

from __future__ import annotations

import pytest

from jupyter_gpuburst.gpu.backend import NoGPUBackend
from jupyter_gpuburst.gpu.nvml import NVMLBackend, visible_devices
from jupyter_gpuburst.gpu.select import open_backend
from jupyter_gpuburst.gpu.testing import FakeGPU, FakeMIG, FakeNVML

GiB = 1 << 30


@pytest.fixture
def fake(monkeypatch):
    slices = [
        FakeMIG("MIG-1", "NVIDIA H100 80GB HBM3 MIG 1g.10gb", GiB, 10 * GiB, 1),
        FakeMIG("MIG-2", "NVIDIA H100 80GB HBM3 MIG 1g.10gb", 0, 10 * GiB, 2),
    ]
    gpus = [FakeGPU("GPU-aaaa", processes=[(101, GiB)]), FakeGPU("GPU-bbbb", processes=[(202, GiB)]), FakeGPU("GPU-mig", mig=slices)]
    return FakeNVML(gpus=gpus).install(monkeypatch.setattr)


@pytest.mark.parametrize(
    ("value", "uuids"),
    [
        (None, ["GPU-aaaa", "GPU-bbbb", "MIG-1", "MIG-2"]),
        ("all", ["GPU-aaaa", "GPU-bbbb", "MIG-1", "MIG-2"]),
        ("/var/run/nvidia-container-devices", ["GPU-aaaa", "GPU-bbbb", "MIG-1", "MIG-2"]),
        ("GPU-bbbb", ["GPU-bbbb"]),
        ("GPU-aaaa,MIG-2", ["GPU-aaaa", "MIG-2"]),
        ("GPU-mig", ["MIG-1", "MIG-2"]),  # a GPU in MIG mode, given whole: its slices
        ("1", ["GPU-bbbb"]),
    ],
)
def test_the_backend_reads_the_devices_it_was_given(fake, monkeypatch, value, uuids):
    if value is None:
        monkeypatch.delenv("NVIDIA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", value)
    backend = open_backend("nvml")
    assert isinstance(backend, NVMLBackend)
    assert [r.uuid for r in backend.read_devices([], 0.0)] == uuids
    # processes too: a neighbour's process on another GPU is not this server's to show
    assert {p.gpu_uuid for p in backend.read_processes([], 0.0)} <= set(uuids)
    backend.close()


@pytest.mark.parametrize("value", ["none", "void", "", "GPU-elsewhere"])
def test_no_device_given_is_no_gpu_with_the_reason(fake, monkeypatch, value):
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", value)
    backend = open_backend("auto")
    assert isinstance(backend, NoGPUBackend)
    assert backend.reason == "no GPU allocated to this server (NVIDIA_VISIBLE_DEVICES lists none NVML finds)"
    assert fake.calls["nvmlShutdown"] == 1


def test_visible_devices_parsing():
    assert visible_devices(None) is None and visible_devices(" all ") is None
    assert visible_devices("GPU-a, MIG-b ,") == frozenset({"GPU-a", "MIG-b"})
    assert visible_devices("none") == frozenset()
