"""NVML backend on nvidia-ml-py's `pynvml` module.

Every pynvml call this module makes goes through the module attribute (`pynvml.nvmlX`), so tests
can replace the library at that boundary. Errors become a user-facing reason, never a traceback.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Sequence

import pynvml

from jupyter_gpuburst.core.keys import NVIDIA_VISIBLE_DEVICES_ENV
from jupyter_gpuburst.gpu.backend import GPUBackend, GPUProcess, GPUReading, GPUUnavailable, KernelRef

log = logging.getLogger(__name__)

MIG_UTILIZATION_NOTE = "MIG slice without GPM: utilization unavailable"
_NVIDIA_DEVICE_PREFIX = "/dev/nvidia"


def unavailable_reason(exc: BaseException) -> str:
    """The sentence users see when NVML cannot show a GPU."""
    if isinstance(exc, pynvml.NVMLError_LibraryNotFound):
        return "no NVIDIA driver found (libnvidia-ml.so.1 missing)"
    if isinstance(exc, pynvml.NVMLError_DriverNotLoaded):
        return "NVIDIA driver not loaded (no GPU attached to this server)"
    if isinstance(exc, pynvml.NVMLError_NoPermission):
        return "no permission to read the GPU (NVML: Insufficient Permissions)"
    if isinstance(exc, pynvml.NVMLError_GpuIsLost):
        return "the GPU fell off the bus (NVML: GPU is lost)"
    if isinstance(exc, pynvml.NVMLError):
        return f"NVML error: {exc}"
    return f"NVML error: {type(exc).__name__}: {exc}"


def visible_devices(value: str | None) -> frozenset[str] | None:
    """The devices ``NVIDIA_VISIBLE_DEVICES`` lets a container use (UUIDs or indices), None for all.

    Unset, ``all`` or a path (the device plugin's volume-mounts strategy) mean every device NVML
    shows; ``none``, ``void`` or empty mean none. Inside a container the NVIDIA runtime already
    hides the others, so this changes nothing there; on a host shared by emulated pods it keeps
    each server to the devices the kubelet gave it.
    """
    if value is None or value.strip() == "all" or value.strip().startswith("/"):
        return None
    tokens = (token.strip() for token in value.split(","))
    return frozenset(token for token in tokens if token and token not in ("none", "void"))


def _text(value: str | bytes) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


class NVMLBackend(GPUBackend):
    """Reads every visible GPU and, when MIG mode is on, every MIG slice instead of its parent."""

    name = "nvml"
    simulated = False

    def __init__(self, visible: str | None = None) -> None:
        # what this server may use; read once, as a container's environment does not change
        self._visible = visible_devices(visible if visible is not None else os.environ.get(NVIDIA_VISIBLE_DEVICES_ENV))
        self._lock = threading.Lock()
        self._opened = False
        # (handle, index, uuid, name, mig, parent_uuid, gpu_instance_id, parent_handle)
        self._devices: list[tuple] = []
        self._temperature_v: bool | None = None
        self._gpm_samples: dict[str, object] = {}

    # -- lifecycle -------------------------------------------------------------------------
    def open(self) -> None:
        with self._lock:
            if self._opened:
                return
            try:
                pynvml.nvmlInit()
            except pynvml.NVMLError as exc:
                raise GPUUnavailable(unavailable_reason(exc)) from exc
            except OSError as exc:  # a broken libnvidia-ml.so, not NVML's own error
                raise GPUUnavailable(f"NVML library could not be loaded: {exc}") from exc
            self._opened = True
            try:
                self._devices = self._enumerate()
            except pynvml.NVMLError as exc:
                self._shutdown()
                raise GPUUnavailable(unavailable_reason(exc)) from exc
            if not self._devices:
                self._shutdown()
                if self._visible is not None:
                    raise GPUUnavailable(f"no GPU allocated to this server ({NVIDIA_VISIBLE_DEVICES_ENV} lists none NVML finds)")
                raise GPUUnavailable("no GPU visible to this server (NVML found 0 devices)")

    def close(self) -> None:
        with self._lock:
            self._shutdown()

    def _shutdown(self) -> None:
        if self._opened:
            for sample in self._gpm_samples.values():
                with contextlib.suppress(pynvml.NVMLError, AttributeError):
                    pynvml.nvmlGpmSampleFree(sample)
            self._gpm_samples.clear()
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlShutdown()
            self._opened = False

    def _enumerate(self) -> list[tuple]:
        """Devices in index order; a GPU in MIG mode is replaced by its MIG slices."""
        devices: list[tuple] = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
            name = _text(pynvml.nvmlDeviceGetName(handle))
            if self._mig_enabled(handle):
                for slot in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
                    try:
                        mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
                    except pynvml.NVMLError_NotFound:
                        continue  # empty slot
                    try:
                        gi = pynvml.nvmlDeviceGetGpuInstanceId(mig)
                    except pynvml.NVMLError:
                        gi = None
                    devices.append(
                        (
                            mig,
                            i,
                            _text(pynvml.nvmlDeviceGetUUID(mig)),
                            _text(pynvml.nvmlDeviceGetName(mig)),
                            True,
                            uuid,
                            gi,
                            handle,
                        )
                    )
            else:
                devices.append((handle, i, uuid, name, False, None, None, None))
        if self._visible is None:
            return devices
        # a MIG slice is visible by its own UUID, or with its whole GPU (by UUID or index)
        return [d for d in devices if {d[2], d[5], str(d[1])} & self._visible]

    @staticmethod
    def _mig_enabled(handle) -> bool:
        try:
            current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
        except pynvml.NVMLError:  # NotSupported on GPUs without MIG
            return False
        return current == pynvml.NVML_DEVICE_MIG_ENABLE

    # -- reads -----------------------------------------------------------------------------
    def read_devices(self, kernels: Sequence[KernelRef], now: float) -> list[GPUReading]:
        with self._lock:
            if not self._opened:
                raise GPUUnavailable("NVML is not initialised")
            try:
                return [self._read_one(dev) for dev in self._devices]
            except pynvml.NVMLError as exc:
                raise GPUUnavailable(unavailable_reason(exc)) from exc

    def _read_one(self, dev: tuple) -> GPUReading:
        handle, index, uuid, name, mig, parent_uuid, gi, parent = dev
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        note = None
        if mig:
            utilization = self._gpm_mig_utilization(parent, gi, uuid)
            if utilization is None:
                note = MIG_UTILIZATION_NOTE
            # Temperature and power belong to the whole board: report the parent's.
            sensor_handle = parent
        else:
            try:
                utilization = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu / 100.0
            except pynvml.NVMLError_NotSupported:
                utilization, note = None, "utilization not supported by this GPU"
            sensor_handle = handle
        return GPUReading(
            index=index,
            uuid=uuid,
            name=name,
            mig=mig,
            parent_uuid=parent_uuid,
            utilization=utilization,
            utilization_note=note,
            memory_used_bytes=int(memory.used),
            memory_total_bytes=int(memory.total),
            temperature_c=self._temperature(sensor_handle),
            power_w=self._power(sensor_handle),
        )

    def _temperature(self, handle) -> int | None:
        # nvmlDeviceGetTemperatureV replaces the deprecated call but needs a newer driver.
        if self._temperature_v is not False:
            try:
                value = pynvml.nvmlDeviceGetTemperatureV(handle, pynvml.NVML_TEMPERATURE_GPU)
                self._temperature_v = True
                return int(value)
            except (pynvml.NVMLError_FunctionNotFound, pynvml.NVMLError_ArgumentVersionMismatch, AttributeError):
                self._temperature_v = False
            except pynvml.NVMLError_NotSupported:
                return None
        try:
            return int(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU))
        except pynvml.NVMLError_NotSupported:
            return None

    @staticmethod
    def _power(handle) -> float | None:
        try:
            return pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0  # milliwatts
        except pynvml.NVMLError_NotSupported:
            return None

    def _gpm_mig_utilization(self, parent, gpu_instance_id, uuid: str) -> float | None:
        """SM utilization of a MIG slice through GPM (Hopper+), from two consecutive samples."""
        if parent is None or gpu_instance_id is None:
            return None
        try:
            if not pynvml.nvmlGpmQueryDeviceSupport(parent).isSupportedDevice:
                return None
            sample = pynvml.nvmlGpmSampleAlloc()
            pynvml.nvmlGpmMigSampleGet(parent, gpu_instance_id, sample)
        except (pynvml.NVMLError, AttributeError):
            return None
        previous = self._gpm_samples.get(uuid)
        self._gpm_samples[uuid] = sample
        if previous is None:
            return None
        try:
            request = pynvml.c_nvmlGpmMetricsGet_t()
            request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
            request.numMetrics = 1
            request.sample1 = previous
            request.sample2 = sample
            request.metrics[0].metricId = pynvml.NVML_GPM_METRIC_SM_UTIL
            result = pynvml.nvmlGpmMetricsGet(request)
            if result.metrics[0].nvmlReturn != pynvml.NVML_SUCCESS:
                return None
            value = result.metrics[0].value / 100.0
        except (pynvml.NVMLError, AttributeError, TypeError):
            return None
        finally:
            with contextlib.suppress(pynvml.NVMLError, AttributeError):
                pynvml.nvmlGpmSampleFree(previous)
        return min(max(value, 0.0), 1.0)

    def read_processes(self, kernels: Sequence[KernelRef], now: float) -> list[GPUProcess]:
        with self._lock:
            if not self._opened:
                return []
            processes: list[GPUProcess] = []
            for dev in self._devices:
                handle, uuid = dev[0], dev[2]
                try:
                    infos = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
                except pynvml.NVMLError as exc:
                    log.debug("process list of %s unavailable: %s", uuid, exc)
                    continue
                for info in infos:
                    pid = getattr(info, "pid", None)
                    used = getattr(info, "usedGpuMemory", None)
                    processes.append(
                        GPUProcess(
                            pid=int(pid) if pid else None,
                            gpu_uuid=uuid,
                            memory_used_bytes=int(used) if used is not None else None,
                        )
                    )
            return processes

    def verify_pid(self, pid: int) -> bool:
        """A process with a CUDA context holds /dev/nvidia* open; where fds are unreadable, trust it.

        This guards against a driver that reports host PIDs colliding with an unrelated local PID.
        """
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            return True
        for fd in fds:
            try:
                if os.readlink(f"{fd_dir}/{fd}").startswith(_NVIDIA_DEVICE_PREFIX):
                    return True
            except OSError:
                continue
        return False
