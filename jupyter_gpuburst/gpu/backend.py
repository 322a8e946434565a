"""The one interface every telemetry backend implements, and the records they return.

A backend reads devices and compute processes; it never decides when to read (the sampler does)
and never talks to the event loop. Backends may block: the sampler calls them from its own
worker thread.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass

BACKEND_NAMES = ("auto", "nvml", "simulated", "none")
# memory in use changing by more than this between samples counts as activity where NVML reads
# no utilization: allocator noise stays under it, a training step's tensors do not. A user's
# server and a GPU kernel's pod judge their GPUs by the same rule.
MEMORY_ACTIVITY_BYTES = 16 * 2**20


class GPUUnavailable(Exception):
    """No GPU can be read; `reason` is the sentence users see ("no NVIDIA driver found ...")."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class KernelRef:
    """A running kernel as the sampler sees it: enough to attribute and to drive the simulation."""

    kernel_id: str
    name: str
    notebook: str | None
    pid: int | None
    execution_state: str = "idle"


@dataclass(frozen=True)
class GPUReading:
    """One device (a whole GPU, or a MIG slice) at one instant."""

    index: int
    uuid: str
    name: str
    mig: bool
    parent_uuid: str | None
    utilization: float | None
    utilization_note: str | None
    memory_used_bytes: int
    memory_total_bytes: int
    temperature_c: int | None
    power_w: float | None

    def to_json(self) -> dict:
        # a flat record of plain values: a shallow copy is what asdict() returns, at a tenth the cost
        return dict(self.__dict__)


@dataclass(frozen=True)
class GPUProcess:
    """A compute process the driver reports on a device (pid as the driver reports it)."""

    pid: int | None
    gpu_uuid: str
    memory_used_bytes: int | None


class GPUBackend(abc.ABC):
    """Reads GPUs. `open` raises GPUUnavailable with a user-facing reason when nothing is visible."""

    name: str = "abstract"
    simulated: bool = False

    def open(self) -> None:  # noqa: B027 - optional hook
        """Acquire the library/driver. Called once, from the sampler's worker thread."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what `open` acquired."""

    @abc.abstractmethod
    def read_devices(self, kernels: Sequence[KernelRef], now: float) -> list[GPUReading]:
        """Utilization, memory, temperature and power of every visible device (cheap; every period)."""

    @abc.abstractmethod
    def read_processes(self, kernels: Sequence[KernelRef], now: float) -> list[GPUProcess]:
        """Compute processes per device (expensive; sampled less often)."""

    def verify_pid(self, pid: int) -> bool:
        """Whether a local process id really is the process the driver reported (default: trust it)."""
        return True


class NoGPUBackend(GPUBackend):
    """The honest empty backend: no GPU visible, with the reason why."""

    name = "none"

    def __init__(self, reason: str = "GPU telemetry disabled (backend 'none')") -> None:
        self.reason = reason

    def open(self) -> None:
        raise GPUUnavailable(self.reason)

    def read_devices(self, kernels: Sequence[KernelRef], now: float) -> list[GPUReading]:
        raise GPUUnavailable(self.reason)

    def read_processes(self, kernels: Sequence[KernelRef], now: float) -> list[GPUProcess]:
        return []
