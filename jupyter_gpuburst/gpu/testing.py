"""A fake NVML at the `pynvml` boundary, for tests and for benchmarking without a GPU.

`FakeNVML(...).install(setattr_fn)` replaces the pynvml functions the NVML backend calls
(pass `monkeypatch.setattr` in tests). Errors are pynvml's own exception classes.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace

import pynvml


@dataclass
class FakeMIG:
    uuid: str
    name: str
    memory_used: int
    memory_total: int
    gpu_instance_id: int = 1
    processes: list[tuple[int, int | None]] = field(default_factory=list)
    sm_util_percent: float = 0.0  # what GPM reads for the slice, where its GPU has GPM


@dataclass
class FakeGPU:
    uuid: str
    name: str = "NVIDIA A100-SXM4-40GB"
    utilization_percent: int | None = 37  # None: NotSupported
    memory_used: int = 1 << 30
    memory_total: int = 40 << 30
    temperature_c: int | None = 41
    power_mw: int | None = 61_500
    processes: list[tuple[int, int | None]] = field(default_factory=list)
    mig: list[FakeMIG] | None = None  # MIG mode on when a list
    mig_slots: int = 7
    gpm: bool = False  # GPU performance monitoring (Hopper and later): per-slice utilization


class _FakeGpmMetricsGet:
    """pynvml's c_nvmlGpmMetricsGet_t, with room for the fake's samples (not ctypes pointers)."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1 = self.sample2 = None
        self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=pynvml.NVML_SUCCESS, value=0.0) for _ in range(4)]


class FakeNVML:
    """A scripted NVML: a list of GPUs, or an error that nvmlInit raises."""

    def __init__(
        self,
        gpus: list[FakeGPU] | None = None,
        init_error: type[pynvml.NVMLError] | None = None,
        device_temperature_v: bool = True,
    ) -> None:
        self.gpus = list(gpus or [])
        self.init_error = init_error
        self.device_temperature_v = device_temperature_v
        self.calls: Counter[str] = Counter()
        self.threads: set[str] = set()
        self.initialised = False
        self.gpm_samples = 0  # allocated and not yet freed
        self._lock = threading.Lock()

    def _called(self, name: str) -> None:
        with self._lock:
            self.calls[name] += 1
            self.threads.add(threading.current_thread().name)

    def _check(self) -> None:
        if not self.initialised:
            raise pynvml.NVMLError_Uninitialized()

    # -- the pynvml functions ----------------------------------------------------------------
    def nvmlInit(self) -> None:
        self._called("nvmlInit")
        if self.init_error is not None:
            raise self.init_error()
        self.initialised = True

    def nvmlShutdown(self) -> None:
        self._called("nvmlShutdown")
        self.initialised = False

    def nvmlDeviceGetCount(self) -> int:
        self._called("nvmlDeviceGetCount")
        self._check()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGPU:
        self._called("nvmlDeviceGetHandleByIndex")
        self._check()
        try:
            return self.gpus[index]
        except IndexError:
            raise pynvml.NVMLError_InvalidArgument() from None

    def nvmlDeviceGetUUID(self, handle) -> str:
        self._called("nvmlDeviceGetUUID")
        return handle.uuid

    def nvmlDeviceGetName(self, handle) -> str:
        self._called("nvmlDeviceGetName")
        return handle.name

    def nvmlDeviceGetMigMode(self, handle) -> list[int]:
        self._called("nvmlDeviceGetMigMode")
        if not isinstance(handle, FakeGPU) or handle.mig is None:
            raise pynvml.NVMLError_NotSupported()
        return [pynvml.NVML_DEVICE_MIG_ENABLE, pynvml.NVML_DEVICE_MIG_ENABLE]

    def nvmlDeviceGetMaxMigDeviceCount(self, handle) -> int:
        self._called("nvmlDeviceGetMaxMigDeviceCount")
        return handle.mig_slots

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, index: int) -> FakeMIG:
        self._called("nvmlDeviceGetMigDeviceHandleByIndex")
        if handle.mig is None or index >= len(handle.mig):
            raise pynvml.NVMLError_NotFound()
        return handle.mig[index]

    def nvmlDeviceGetGpuInstanceId(self, handle) -> int:
        self._called("nvmlDeviceGetGpuInstanceId")
        if not isinstance(handle, FakeMIG):
            raise pynvml.NVMLError_InvalidArgument()
        return handle.gpu_instance_id

    def nvmlDeviceGetMemoryInfo(self, handle):
        self._called("nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(used=handle.memory_used, total=handle.memory_total, free=handle.memory_total - handle.memory_used)

    def nvmlDeviceGetUtilizationRates(self, handle):
        self._called("nvmlDeviceGetUtilizationRates")
        if isinstance(handle, FakeMIG) or handle.mig is not None or handle.utilization_percent is None:
            raise pynvml.NVMLError_NotSupported()
        return SimpleNamespace(gpu=handle.utilization_percent, memory=0)

    def nvmlDeviceGetTemperatureV(self, handle, sensor) -> int:
        self._called("nvmlDeviceGetTemperatureV")
        if not self.device_temperature_v:
            raise pynvml.NVMLError_FunctionNotFound()
        if handle.temperature_c is None:
            raise pynvml.NVMLError_NotSupported()
        return handle.temperature_c

    def nvmlDeviceGetTemperature(self, handle, sensor) -> int:
        self._called("nvmlDeviceGetTemperature")
        if handle.temperature_c is None:
            raise pynvml.NVMLError_NotSupported()
        return handle.temperature_c

    def nvmlDeviceGetPowerUsage(self, handle) -> int:
        self._called("nvmlDeviceGetPowerUsage")
        if handle.power_mw is None:
            raise pynvml.NVMLError_NotSupported()
        return handle.power_mw

    def nvmlDeviceGetComputeRunningProcesses(self, handle) -> list:
        self._called("nvmlDeviceGetComputeRunningProcesses")
        if isinstance(handle, FakeGPU) and handle.mig is not None:
            raise pynvml.NVMLError_NoPermission()  # the parent of MIG slices lists nothing useful
        return [
            SimpleNamespace(pid=pid, usedGpuMemory=used, gpuInstanceId=0xFFFFFFFF, computeInstanceId=0xFFFFFFFF)
            for pid, used in handle.processes
        ]

    def nvmlGpmQueryDeviceSupport(self, handle):
        self._called("nvmlGpmQueryDeviceSupport")
        return SimpleNamespace(isSupportedDevice=1 if getattr(handle, "gpm", False) else 0)

    def nvmlGpmSampleAlloc(self):
        self._called("nvmlGpmSampleAlloc")
        with self._lock:
            self.gpm_samples += 1
        return SimpleNamespace(mig=None, freed=False)

    def nvmlGpmSampleFree(self, sample) -> None:
        self._called("nvmlGpmSampleFree")
        with self._lock:
            self.gpm_samples -= 1
        sample.freed = True

    def nvmlGpmMigSampleGet(self, parent, gpu_instance_id: int, sample) -> None:
        self._called("nvmlGpmMigSampleGet")
        if not getattr(parent, "gpm", False):
            raise pynvml.NVMLError_NotSupported()
        for mig in parent.mig or []:
            if mig.gpu_instance_id == gpu_instance_id:
                sample.mig = mig
                return
        raise pynvml.NVMLError_NotFound()

    def nvmlGpmMetricsGet(self, request):
        """SM utilization over the two samples: the slice's sm_util_percent (as GPM, in percent)."""
        self._called("nvmlGpmMetricsGet")
        if request.sample1 is None or request.sample2 is None or request.sample1.freed or request.sample2.freed:
            raise pynvml.NVMLError_InvalidArgument()
        for metric in request.metrics[: request.numMetrics]:
            if metric.metricId == pynvml.NVML_GPM_METRIC_SM_UTIL:
                metric.value = float(request.sample2.mig.sm_util_percent)
            else:
                metric.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return request

    NAMES = (
        "nvmlInit",
        "nvmlShutdown",
        "nvmlDeviceGetCount",
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetUUID",
        "nvmlDeviceGetName",
        "nvmlDeviceGetMigMode",
        "nvmlDeviceGetMaxMigDeviceCount",
        "nvmlDeviceGetMigDeviceHandleByIndex",
        "nvmlDeviceGetGpuInstanceId",
        "nvmlDeviceGetMemoryInfo",
        "nvmlDeviceGetUtilizationRates",
        "nvmlDeviceGetTemperatureV",
        "nvmlDeviceGetTemperature",
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetComputeRunningProcesses",
        "nvmlGpmQueryDeviceSupport",
        "nvmlGpmSampleAlloc",
        "nvmlGpmSampleFree",
        "nvmlGpmMigSampleGet",
        "nvmlGpmMetricsGet",
    )

    def install(self, setattr_fn: Callable[[object, str, object], None] = setattr) -> FakeNVML:
        """Put this fake in place of the real functions on the pynvml module."""
        for name in self.NAMES:
            setattr_fn(pynvml, name, getattr(self, name))
        setattr_fn(pynvml, "c_nvmlGpmMetricsGet_t", _FakeGpmMetricsGet)
        return self
