"""The sampler: one sample per period for any number of clients, off the loop, paused when unheard."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Sequence

import pytest

from jupyter_gpuburst.gpu.backend import GPUBackend, GPUProcess, GPUReading, KernelRef, NoGPUBackend
from jupyter_gpuburst.gpu.sampler import Sampler


class CountingBackend(GPUBackend):
    name = "counting"

    def __init__(self) -> None:
        self.device_reads = 0
        self.process_reads = 0
        self.threads: set[int] = set()

    def read_devices(self, kernels: Sequence[KernelRef], now: float) -> list[GPUReading]:
        self.device_reads += 1
        self.threads.add(threading.get_ident())
        return [GPUReading(0, "GPU-c", "Fake", False, None, 0.5, None, 1, 2, 40, 50.0)]

    def read_processes(self, kernels: Sequence[KernelRef], now: float) -> list[GPUProcess]:
        self.process_reads += 1
        self.threads.add(threading.get_ident())
        return [GPUProcess(k.pid, "GPU-c", 7) for k in kernels if k.pid]


async def test_concurrent_requests_share_one_sample():
    backend = CountingBackend()
    sampler = Sampler(backend, period_s=5.0, process_period_s=5.0)
    try:
        samples = await asyncio.gather(*(sampler.current() for _ in range(100)))
        assert backend.device_reads == 1
        assert len({s.seq for s in samples}) == 1
        assert samples[0].data["gpus"][0]["uuid"] == "GPU-c"
        assert threading.get_ident() not in backend.threads  # never on the event loop's thread
    finally:
        await sampler.close()


async def test_process_list_sampled_less_often_and_on_kernel_change():
    backend = CountingBackend()
    kernels = [KernelRef("k1", "python3", None, None, "idle")]

    async def source():
        return list(kernels)

    sampler = Sampler(backend, source, period_s=0.02, process_period_s=0.2)
    try:
        async with sampler.subscribe():
            await asyncio.sleep(0.45)
            assert backend.process_reads >= 2
            assert backend.device_reads >= 3 * backend.process_reads  # period 0.02 s vs 0.2 s
            before = backend.process_reads
            kernels.append(KernelRef("k2", "python3", None, os.getpid(), "busy"))  # a real, visible pid
            sample = await sampler.next_sample(sampler._latest)
            sample = await sampler.next_sample(sample)
            assert backend.process_reads > before
            assert {k["kernel_id"] for k in sample.data["kernels"]} == {"k1", "k2"}
            assert sample.data["kernels"][1]["gpus"] == [{"uuid": "GPU-c", "memory_used_bytes": 7}]
    finally:
        await sampler.close()


async def test_sampling_pauses_when_nobody_listens():
    backend = CountingBackend()
    sampler = Sampler(backend, period_s=0.02, process_period_s=0.02, lease_periods=3)
    try:
        async with sampler.subscribe():
            await asyncio.sleep(0.1)
        assert sampler.running
        await asyncio.sleep(0.15)  # lease of 3 periods runs out
        assert not sampler.running
        reads = backend.device_reads
        await asyncio.sleep(0.1)
        assert backend.device_reads == reads
        await sampler.current()  # a request resumes it
        assert backend.device_reads == reads + 1
    finally:
        await sampler.close()


async def test_history_is_bounded():
    sampler = Sampler(CountingBackend(), period_s=0.01, process_period_s=0.01, history_length=5)
    try:
        async with sampler.subscribe():
            await asyncio.sleep(0.15)
        history = sampler.history()
        assert len(history) == 5
        assert [s.seq for s in history] == sorted(s.seq for s in history)
    finally:
        await sampler.close()


async def test_no_gpu_sample_lists_kernels_without_gpus():
    async def source():
        return [KernelRef("k1", "python3", "nb.ipynb", 11, "idle")]

    sampler = Sampler(NoGPUBackend("no NVIDIA driver found (libnvidia-ml.so.1 missing)"), source)
    try:
        data = (await sampler.current()).data
        assert data["available"] is False and data["backend"] == "none" and data["simulated"] is False
        assert data["reason"] == "no NVIDIA driver found (libnvidia-ml.so.1 missing)"
        assert data["gpus"] == [] and data["kernels"][0]["gpus"] == []
    finally:
        await sampler.close()


async def test_failing_backend_gives_a_reason_not_a_crash():
    class Broken(CountingBackend):
        def read_devices(self, kernels, now):
            raise RuntimeError("boom")

    sampler = Sampler(Broken(), period_s=0.01, process_period_s=0.01)
    try:
        data = (await sampler.current()).data
        assert data["available"] is False and data["reason"] == "telemetry error: RuntimeError"
    finally:
        await sampler.close()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"period_s": 0}, "sampling period must be positive"),
        ({"period_s": 2.0, "process_period_s": 1.0}, "must not be shorter"),
        ({"history_length": 0}, "history length"),
    ],
)
def test_bad_settings_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Sampler(CountingBackend(), **kwargs)
