"""NVML on a real GPU (opt-in: skips where NVML does not initialise).

Timing NVML is the telemetry benchmark's job (`gpuburst bench telemetry --backend nvml
--cycle-only`); these tests check what is read and to whom it is attributed.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pynvml
import pytest
from helpers.programs import GPU_WORKER

from jupyter_gpuburst.gpu.backend import KernelRef
from jupyter_gpuburst.gpu.nvml import NVMLBackend
from jupyter_gpuburst.gpu.sampler import Sampler

pytestmark = pytest.mark.gpu

GiB = 1 << 30

# A stand-in kernel: holds 1 GiB on the first GPU and keeps it busy until its stdin closes.


def _nvml_or_skip() -> None:
    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except pynvml.NVMLError as exc:
        pytest.skip(f"NVML does not initialise here: {exc}")


@pytest.fixture
def backend():
    _nvml_or_skip()
    b = NVMLBackend()
    b.open()
    yield b
    b.close()


@pytest.fixture
def gpu_worker():
    _nvml_or_skip()
    proc = subprocess.Popen(
        [sys.executable, "-c", GPU_WORKER, "compute", str(1 << 30)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        line = proc.stdout.readline().strip()
        if line.startswith("skip:") or not line:
            pytest.skip(f"no CUDA program can run here ({line or 'the worker exited'})")
        assert line == "ready"
        yield proc
    finally:
        proc.stdin.close()
        proc.kill()
        proc.wait(10)


def test_real_gpu_readings(backend):
    readings = backend.read_devices([], time.time())
    assert readings, "NVML initialised but reported no device"
    for r in readings:
        assert r.uuid.startswith(("GPU-", "MIG-"))
        assert r.memory_total_bytes > 0 and 0 <= r.memory_used_bytes <= r.memory_total_bytes
        assert r.utilization is None or 0.0 <= r.utilization <= 1.0
        assert r.utilization is not None or r.utilization_note
        assert r.temperature_c is None or 0 < r.temperature_c < 120
        assert r.power_w is None or r.power_w > 0
    assert isinstance(backend.read_processes([], time.time()), list)


async def test_a_kernel_using_the_gpu_gets_its_memory_and_the_gpu_shows_busy(gpu_worker):
    kernel = KernelRef("k-real", "python3", "train.ipynb", gpu_worker.pid, "busy")

    async def kernels():
        return [kernel]

    sampler = Sampler("nvml", kernels, period_s=0.2, process_period_s=0.2)
    try:
        async with sampler.subscribe():  # as a panel does: the sampler samples while someone listens
            busy = 0.0
            sample = None
            for _ in range(50):  # the driver averages utilization over its own window
                sample = await sampler.next_sample(sample, timeout=10)
                assert sample is not None, "no sample within 10 s"
                assert sample.data["backend"] == "nvml" and sample.data["reason"] is None, sample.data
                busy = max((g["utilization"] or 0.0 for g in sample.data["gpus"]), default=0.0)
                if busy > 0.2 and sample.data["kernels"][0]["gpus"]:
                    break
        data = sample.data
        assert busy > 0.2, f"a GPU running matrix products reads {busy:.0%} busy: {data['gpus']}"
        (entry,) = data["kernels"]
        assert entry["kernel_id"] == "k-real"
        assert entry["gpus"], f"the worker's process was not attributed: unattributed {data['unattributed']}"
        first = data["gpus"][0]["uuid"]
        used = {g["uuid"]: g["memory_used_bytes"] for g in entry["gpus"]}
        assert first in used
        assert used[first] is None or used[first] >= GiB
        assert not [p for p in data["unattributed"] if p["pid"] == gpu_worker.pid]
    finally:
        await sampler.close()
