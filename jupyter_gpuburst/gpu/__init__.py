"""GPU telemetry for the user's server: backends (NVML, simulated, none), attribution, sampler."""

from jupyter_gpuburst.server.gpu.backend import BACKEND_NAMES, GPUBackend, GPUProcess, GPUReading, GPUUnavailable, KernelRef, NoGPUBackend
from jupyter_gpuburst.server.gpu.sampler import Sample, Sampler
from jupyter_gpuburst.server.gpu.select import open_backend

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
