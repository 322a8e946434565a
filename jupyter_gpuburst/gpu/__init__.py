"""Reading GPUs, for the user's server and for a GPU kernel's pod: backends (NVML, simulated, none), attribution, sampler."""

from jupyter_gpuburst.gpu.backend import BACKEND_NAMES, GPUBackend, GPUProcess, GPUReading, GPUUnavailable, KernelRef, NoGPUBackend
from jupyter_gpuburst.gpu.sampler import Sample, Sampler
from jupyter_gpuburst.gpu.select import open_backend

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
