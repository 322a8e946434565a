"""The sampler: one sample per period for any number of clients, off the loop, paused when unheard."""

from __future__ import annotations

import asyncio
import itertools
import os
import threading
from collections.abc import Sequence

import pytest

from jupyter_gpuburst.gpu.backend import GPUBackend, GPUProcess, GPUReading, KernelRef, NoGPUBackend
from jupyter_gpuburst.gpu.sampler import Sampler
from jupyter_gpuburst.sim.testing import wait_until


class CountingBackend(GPUBackend):
    name = "counting"

    def __init__(self) -> None:
        self.device_reads = 0
        self.process_reads = 0
        self.threads: set[int] = set()
        self.process_times: list[float] = []

    def read_devices(self, kernels: Sequence[KernelRef], now: float) -> list[GPUReading]:
        self.device_reads += 1
        self.threads.add(threading.get_ident())
        return [GPUReading(0, "GPU-c", "Fake", False, None, 0.5, None, 1, 2, 40, 50.0)]

    def read_processes(self, kernels: Sequence[KernelRef], now: float) -> list[GPUProcess]:
        self.process_reads += 1
        self.process_times.append(now)
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


async def test_process_list_sampled_less_often():
    backend = CountingBackend()

    async def source():
        return [KernelRef("k1", "python3", None, None, "idle")]

    sampler = Sampler(backend, source, period_s=0.02, process_period_s=0.3)
    try:
        async with sampler.subscribe():
            sample = await sampler.next_sample(None)
            while backend.process_reads < 3:  # counted in samples, not seconds: a loaded machine is slow
                sample = await sampler.next_sample(sample)
        # a process read only once the last is a process period old; a device read every sample
        gaps = [b - a for a, b in itertools.pairwise(backend.process_times)]
        assert all(gap >= 0.3 for gap in gaps), gaps
        assert backend.device_reads >= sample.seq > backend.process_reads
    finally:
        await sampler.close()


async def test_process_list_read_again_when_a_kernel_starts():
    backend = CountingBackend()
    kernels = [KernelRef("k1", "python3", None, None, "idle")]

    async def source():
        return list(kernels)

    sampler = Sampler(backend, source, period_s=0.02, process_period_s=60.0)  # the clock never asks
    try:
        async with sampler.subscribe():
            sample = await sampler.next_sample(None)
            assert backend.process_reads == 1
            kernels.append(KernelRef("k2", "python3", None, os.getpid(), "busy"))  # a real, visible pid
            sample = await sampler.next_sample(sample)  # may have listed kernels before k2 came
            sample = await sampler.next_sample(sample)
            assert backend.process_reads == 2
            assert {k["kernel_id"] for k in sample.data["kernels"]} == {"k1", "k2"}
            assert sample.data["kernels"][1]["gpus"] == [{"uuid": "GPU-c", "memory_used_bytes": 7}]
    finally:
        await sampler.close()


async def test_sampling_pauses_when_nobody_listens():
    backend = CountingBackend()
    sampler = Sampler(backend, period_s=0.02, process_period_s=0.02, lease_periods=3)
    try:
        async with sampler.subscribe():
            await sampler.next_sample(None)
        await sampler.current()  # a request: sampling goes on for its lease of 3 periods
        leased_at = asyncio.get_running_loop().time()
        await wait_until(lambda: not sampler.running, 10, "sampling to pause", interval=0.01)
        assert asyncio.get_running_loop().time() - leased_at >= 3 * 0.02
        reads = backend.device_reads
        await asyncio.sleep(0.1)  # five periods with nobody listening
        assert backend.device_reads == reads
        await sampler.current()  # a request resumes it
        assert backend.device_reads == reads + 1
    finally:
        await sampler.close()


async def test_history_is_bounded():
    sampler = Sampler(CountingBackend(), period_s=0.01, process_period_s=0.01, history_length=5)
    try:
        async with sampler.subscribe():
            sample = await sampler.next_sample(None)
            while sample.seq < 8:
                sample = await sampler.next_sample(sample)
        history = sampler.history()
        latest = sampler._latest.seq  # the loop may have sampled again before this line
        assert [s.seq for s in history] == list(range(latest - 4, latest + 1))
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
