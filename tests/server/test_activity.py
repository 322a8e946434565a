"""Where the idle signal comes from: a GPU kernel's pod and a user's server measure GPU activity
themselves (utilization over the threshold, a kernel executing, or, without a utilization
reading, GPU memory changing) and say which basis they used."""

from __future__ import annotations

import time

from jupyter_gpuburst.kernel.gpu import KernelGPUReporter
from jupyter_gpuburst.server.activity import MEMORY_ACTIVITY_BYTES, ActivityReporter
from jupyter_gpuburst.server.gpu.backend import GPUBackend, GPUReading

MiB = 2**20


class ScriptedGPU(GPUBackend):
    """One device whose readings a test sets: utilization None is a MIG slice without GPM."""

    name = "scripted"

    def __init__(self) -> None:
        self.utilization: float | None = 0.0
        self.memory = 1000 * MiB

    def read_devices(self, kernels, now):
        return [GPUReading(0, "GPU-0", "A100", self.utilization is None, None, self.utilization, None, self.memory, 40_000 * MiB, None, None)]

    def read_processes(self, kernels, now):
        return []


def test_a_kernel_pod_reports_how_long_its_gpu_has_been_idle():
    gpu = ScriptedGPU()
    reporter = KernelGPUReporter(gpu, "k")
    gpu.utilization = 0.5
    reporter.sample()
    assert reporter.report()["busy_ago_s"] < 1 and reporter.report()["busy_basis"] == "utilization"
    reporter.busy_at -= 100  # as if sampled 100 s ago, idle since
    gpu.utilization = 0.01  # under the 5 % threshold
    reporter.sample()
    assert reporter.report()["busy_ago_s"] >= 100
    reporter.threshold = 0.005  # the hub's stricter threshold makes the same reading busy
    reporter.sample()
    assert reporter.report()["busy_ago_s"] < 1


def test_a_mig_slice_without_utilization_is_judged_by_memory_activity_and_says_so():
    gpu = ScriptedGPU()
    gpu.utilization = None
    reporter = KernelGPUReporter(gpu, "k")
    reporter.sample()
    reporter.busy_at -= 100
    gpu.memory += MEMORY_ACTIVITY_BYTES // 4  # allocator noise
    reporter.sample()
    report = reporter.report()
    assert report["busy_basis"] == "memory" and report["busy_ago_s"] >= 100
    gpu.memory += 2 * MEMORY_ACTIVITY_BYTES  # a training step's tensors
    reporter.sample()
    assert reporter.report()["busy_ago_s"] < 1


def test_a_kernel_executing_counts_as_busy_whatever_the_gpu_says():
    reporter = KernelGPUReporter(ScriptedGPU(), "k")
    reporter.busy_at -= 100
    reporter.busy = True
    assert reporter.report()["busy_ago_s"] < 1


class Sampler:
    def __init__(self, gpus):
        self.gpus = gpus

    async def current(self):
        class S:
            data = {"available": bool(self.gpus), "gpus": self.gpus}

        return S()


class Kernels:
    def __init__(self, states):
        self.kernels = {k: type("K", (), {"execution_state": s})() for k, s in states.items()}

    def list_kernel_ids(self):
        return list(self.kernels)

    def get_kernel(self, kernel_id):
        return self.kernels[kernel_id]


async def test_a_server_reports_an_age_numbered_and_no_gpu_as_null():
    gpus = [{"uuid": "GPU-0", "utilization": 0.0, "memory_used_bytes": MiB}]
    reporter = ActivityReporter("http://hub/activity", "secret", "", Sampler(gpus), Kernels({"a": "idle"}))
    await reporter.sample()
    reporter.busy_at = time.monotonic() - 42
    await reporter.sample()
    first = await reporter.body()
    assert 42 <= first["gpu_idle_s"] < 44 and first["basis"] == "utilization" and first["seq"] == 1
    # a kernel executing is activity, an open panel is not
    busy = ActivityReporter("http://hub/activity", "secret", "", Sampler(gpus), Kernels({"a": "busy"}))
    busy.busy_at = time.monotonic() - 42
    await busy.sample()
    assert (await busy.body())["gpu_idle_s"] < 1
    second = await reporter.body()
    assert second["seq"] == 2 and second["boot"] == first["boot"]
    # no GPU visible: "no reading", never "idle"
    cpu = ActivityReporter("http://hub/activity", "secret", "", Sampler([]), Kernels({}))
    await cpu.sample()
    assert (await cpu.body())["gpu_idle_s"] is None
    assert "secret" not in str(await reporter.body())
