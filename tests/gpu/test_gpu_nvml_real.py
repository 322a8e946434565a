"""NVML on a real GPU (opt-in: skips where NVML does not initialise)."""

from __future__ import annotations

import time

import pynvml
import pytest

from jupyter_gpuburst.server.gpu.nvml import NVMLBackend

pytestmark = pytest.mark.gpu


@pytest.fixture
def backend():
    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except pynvml.NVMLError as exc:
        pytest.skip(f"NVML does not initialise here: {exc}")
    b = NVMLBackend()
    b.open()
    yield b
    b.close()


def test_real_gpu_readings(backend):
    readings = backend.read_devices([], time.time())
    assert readings, "NVML initialised but reported no device"
    for r in readings:
        assert r.uuid.startswith(("GPU-", "MIG-"))
        assert r.memory_total_bytes > 0 and 0 <= r.memory_used_bytes <= r.memory_total_bytes
        assert r.utilization is None or 0.0 <= r.utilization <= 1.0
        assert r.utilization is not None or r.utilization_note
    assert isinstance(backend.read_processes([], time.time()), list)


def test_real_gpu_sample_is_fast(backend):
    durations = []
    for _ in range(200):
        t0 = time.perf_counter()
        backend.read_devices([], time.time())
        durations.append(time.perf_counter() - t0)
    durations.sort()
    assert durations[int(0.99 * len(durations)) - 1] < 0.005
