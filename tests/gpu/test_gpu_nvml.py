"""NVML backend against a fake NVML at the pynvml boundary."""

from __future__ import annotations

import pynvml
import pytest

from jupyter_gpuburst.gpu import NoGPUBackend, open_backend
from jupyter_gpuburst.gpu.backend import GPUUnavailable
from jupyter_gpuburst.gpu.nvml import MIG_UTILIZATION_NOTE, NVMLBackend
from jupyter_gpuburst.gpu.testing import FakeGPU, FakeMIG, FakeNVML

GiB = 1 << 30


def two_gpus() -> list[FakeGPU]:
    return [
        FakeGPU(
            "GPU-aaaa",
            utilization_percent=37,
            memory_used=3 * GiB,
            temperature_c=44,
            power_mw=61_500,
            processes=[(101, 2 * GiB), (102, None)],
        ),
        FakeGPU(
            "GPU-bbbb",
            name="NVIDIA A100-SXM4-40GB",
            utilization_percent=0,
            memory_used=0,
            temperature_c=30,
            power_mw=50_000,
        ),
    ]


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (pynvml.NVMLError_LibraryNotFound, "no NVIDIA driver found (libnvidia-ml.so.1 missing)"),
        (pynvml.NVMLError_DriverNotLoaded, "NVIDIA driver not loaded"),
        (pynvml.NVMLError_NoPermission, "no permission"),
        (pynvml.NVMLError_Unknown, "NVML error: Unknown Error"),
    ],
)
def test_init_failure_gives_reason(monkeypatch, error, expected):
    FakeNVML(init_error=error).install(monkeypatch.setattr)
    backend = open_backend("auto")
    assert isinstance(backend, NoGPUBackend)
    assert expected in backend.reason
    with pytest.raises(GPUUnavailable) as info:
        backend.read_devices([], 0.0)
    assert expected in info.value.reason


def test_zero_devices_is_no_gpu(monkeypatch):
    fake = FakeNVML(gpus=[]).install(monkeypatch.setattr)
    with pytest.raises(GPUUnavailable, match="NVML found 0 devices"):
        NVMLBackend().open()
    assert fake.calls["nvmlShutdown"] == 1  # released what it initialised


def test_two_gpus_readings(monkeypatch):
    FakeNVML(gpus=two_gpus()).install(monkeypatch.setattr)
    backend = open_backend("nvml")
    assert isinstance(backend, NVMLBackend)
    readings = backend.read_devices([], 0.0)
    assert [r.index for r in readings] == [0, 1]
    first = readings[0]
    assert (first.uuid, first.name, first.mig, first.parent_uuid) == ("GPU-aaaa", "NVIDIA A100-SXM4-40GB", False, None)
    assert first.utilization == pytest.approx(0.37)
    assert first.memory_used_bytes == 3 * GiB and first.memory_total_bytes == 40 * GiB
    assert first.temperature_c == 44 and first.power_w == pytest.approx(61.5)
    processes = backend.read_processes([], 0.0)
    assert {(p.pid, p.gpu_uuid, p.memory_used_bytes) for p in processes} == {
        (101, "GPU-aaaa", 2 * GiB),
        (102, "GPU-aaaa", None),
    }
    backend.close()


def test_utilization_not_supported_is_none_with_note(monkeypatch):
    FakeNVML(gpus=[FakeGPU("GPU-x", utilization_percent=None, power_mw=None, temperature_c=None)]).install(monkeypatch.setattr)
    backend = open_backend("auto")
    (reading,) = backend.read_devices([], 0.0)
    assert reading.utilization is None
    assert reading.utilization_note == "utilization not supported by this GPU"
    assert reading.power_w is None and reading.temperature_c is None
    assert reading.memory_used_bytes == 1 * GiB


def test_mig_gpu_reports_slices(monkeypatch):
    slices = [
        FakeMIG("MIG-1111", "NVIDIA A100-SXM4-40GB MIG 3g.20gb", 5 * GiB, 20 * GiB, 1, [(201, 4 * GiB)]),
        FakeMIG("MIG-2222", "NVIDIA A100-SXM4-40GB MIG 3g.20gb", 0, 20 * GiB, 2, []),
    ]
    fake = FakeNVML(gpus=[FakeGPU("GPU-parent", mig=slices, temperature_c=50, power_mw=90_000)])
    fake.install(monkeypatch.setattr)
    backend = open_backend("auto")
    readings = backend.read_devices([], 0.0)
    assert [(r.uuid, r.mig, r.parent_uuid, r.index) for r in readings] == [
        ("MIG-1111", True, "GPU-parent", 0),
        ("MIG-2222", True, "GPU-parent", 0),
    ]
    for r in readings:
        assert r.utilization is None and r.utilization_note == MIG_UTILIZATION_NOTE
        assert r.memory_total_bytes == 20 * GiB
        assert r.temperature_c == 50 and r.power_w == pytest.approx(90.0)  # the board's sensors
    assert readings[0].memory_used_bytes == 5 * GiB
    assert fake.calls["nvmlDeviceGetUtilizationRates"] == 0  # NotSupported under MIG: not even tried
    processes = backend.read_processes([], 0.0)
    assert [(p.pid, p.gpu_uuid, p.memory_used_bytes) for p in processes] == [(201, "MIG-1111", 4 * GiB)]


def test_temperature_falls_back_to_deprecated_call(monkeypatch):
    fake = FakeNVML(gpus=[FakeGPU("GPU-old", temperature_c=55)], device_temperature_v=False)
    fake.install(monkeypatch.setattr)
    backend = open_backend("auto")
    assert backend.read_devices([], 0.0)[0].temperature_c == 55
    assert backend.read_devices([], 0.0)[0].temperature_c == 55
    assert fake.calls["nvmlDeviceGetTemperatureV"] == 1  # learned once, not retried every sample


def test_gpu_lost_mid_run_becomes_reason(monkeypatch):
    fake = FakeNVML(gpus=two_gpus()).install(monkeypatch.setattr)
    backend = open_backend("auto")

    def lost(handle):
        raise pynvml.NVMLError_GpuIsLost()

    monkeypatch.setattr(pynvml, "nvmlDeviceGetMemoryInfo", lost)
    with pytest.raises(GPUUnavailable, match="GPU is lost"):
        backend.read_devices([], 0.0)
    assert fake.initialised


def test_unknown_backend_name_is_rejected():
    with pytest.raises(ValueError, match="unknown GPU backend 'cuda'"):
        open_backend("cuda")


def test_verify_pid_rejects_process_without_gpu_device():
    import os

    # This test process has no /dev/nvidia* open: a driver-reported pid equal to it is not it.
    assert NVMLBackend().verify_pid(os.getpid()) is False
    assert NVMLBackend().verify_pid(2**22 + 12345) is True  # invisible: cannot tell, trust the driver
