"""GPU telemetry for the user's server: backends (NVML, simulated, none), attribution, sampler."""

from .backend import BACKEND_NAMES, GPUBackend, GPUProcess, GPUReading, GPUUnavailable, KernelRef, NoGPUBackend
from .sampler import Sample, Sampler
from .select import open_backend

__all__ = [
    "BACKEND_NAMES",
    "GPUBackend",
    "GPUProcess",
    "GPUReading",
    "GPUUnavailable",
    "KernelRef",
    "NoGPUBackend",
    "Sample",
    "Sampler",
    "open_backend",
]
