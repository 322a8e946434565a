"""Where a GPU kernel's idle signal comes from: its pod measures its own GPU (utilization over
the threshold, the kernel executing, or, without a utilization reading, GPU memory changing) and
says which basis it used."""

from __future__ import annotations

from jupyter_gpuburst.gpu.backend import MEMORY_ACTIVITY_BYTES, GPUBackend, GPUReading
from jupyter_gpuburst.kernel.gpu import KernelGPUReporter

MiB = 2**20


class ScriptedGPU(GPUBackend):
    """One device whose readings a test sets: utilization None is a MIG slice without GPM."""

    name = "scripted"

    def __init__(self) -> None:
        self.utilization: float | None = 0.0
        self.memory = 1000 * MiB

    def read_devices(self, kernels, now):
        return [
            GPUReading(0, "GPU-0", "A100", self.utilization is None, None, self.utilization, None, self.memory, 40_000 * MiB, None, None)
        ]

    def read_processes(self, kernels, now):
        return []


def test_a_kernel_pod_reports_how_long_its_gpu_has_been_idle():
    gpu = ScriptedGPU()
    reporter = KernelGPUReporter(gpu, "k")
    gpu.utilization = 0.5
    reporter.sample()
    assert reporter.report()["busy_ago_s"] < 1 and reporter.report()["busy_basis"] == "utilization"
    gpu.utilization = 0.01  # under the 5 % threshold
    reporter.sample()
    # idle since some moment after the busy sample: counted from this first idle one, so that a
    # stop is never early
    assert reporter.report()["busy_ago_s"] < 1
    reporter.busy_at -= 100  # as if that idle sample was taken 100 s ago
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
