"""A simulated GPU for the demo and the tests: deterministic curves driven by the running kernels.

Each kernel is pinned to one simulated GPU (a stable hash of its id). A busy kernel raises its
GPU's utilization along a fixed curve of time; each running kernel holds GPU memory that grows
with the time it has spent busy. The fake compute processes carry the kernels' real PIDs, so the
attribution path a real GPU would take is exercised for real. Every sample is labelled simulated.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import threading
import uuid as uuidlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from jupyter_gpuburst.core.keys import SIM_GPUS_ENV, SIM_MODEL_ENV
from jupyter_gpuburst.gpu.backend import GPUBackend, GPUProcess, GPUReading, KernelRef

MiB = 1024**2
GiB = 1024**3


@dataclass(frozen=True)
class GPUModel:
    name: str  # as NVML reports it
    memory_total_bytes: int
    idle_power_w: float
    max_power_w: float
    # the node label GPU feature discovery sets for it (nvidia.com/gpu.product)
    product_label: str = ""
    mig: bool = False


MODELS: dict[str, GPUModel] = {
    m.name: m
    for m in (
        GPUModel("NVIDIA A100-SXM4-40GB", 40960 * MiB, 55.0, 400.0, "NVIDIA-A100-SXM4-40GB"),
        GPUModel("NVIDIA A100-SXM4-80GB", 81920 * MiB, 60.0, 400.0, "NVIDIA-A100-SXM4-80GB"),
        # one 1g.10gb slice of an A100 80GB in MIG mode: a seventh of its compute, 9.75 GiB
        GPUModel("NVIDIA A100-SXM4-80GB MIG 1g.10gb", 9984 * MiB, 8.0, 57.0, "NVIDIA-A100-SXM4-80GB-MIG-1g.10gb", mig=True),
        GPUModel("NVIDIA H100 80GB HBM3", 81559 * MiB, 70.0, 700.0, "NVIDIA-H100-80GB-HBM3"),
        GPUModel("NVIDIA L4", 23034 * MiB, 16.0, 72.0, "NVIDIA-L4"),
        GPUModel("Tesla T4", 15360 * MiB, 10.0, 70.0, "Tesla-T4"),
    )
}
# A node's nvidia.com/gpu.product label names the same model: either spelling is accepted.
BY_PRODUCT_LABEL: dict[str, str] = {m.product_label: m.name for m in MODELS.values() if m.product_label}
DEFAULT_MODEL = "NVIDIA A100-SXM4-40GB"

KERNEL_BASE_MEMORY = 512 * MiB  # a CUDA context plus a framework's first allocation
KERNEL_GROWTH_PER_BUSY_S = 64 * MiB
KERNEL_MEMORY_SHARE_CAP = 0.45  # one kernel never takes more than this share of its GPU
BUSY_STATES = frozenset({"busy"})


def config_from_env(environ: Mapping[str, str] | None = None) -> tuple[int, str]:
    """(GPU count, model name) from JUPYTER_GPUBURST_SIM_GPUS / _SIM_MODEL, validated."""
    env = os.environ if environ is None else environ
    raw = env.get(SIM_GPUS_ENV, "1")
    try:
        count = int(raw)
    except ValueError:
        raise ValueError(f"{SIM_GPUS_ENV}={raw!r}: expected a whole number of GPUs (1-16)") from None
    model = env.get(SIM_MODEL_ENV, DEFAULT_MODEL)
    validate(count, model)
    return count, model


def model_name(model: str) -> str:
    """The NVML name of ``model``, given as an NVML name or as a node's product label."""
    return BY_PRODUCT_LABEL.get(model, model)


def validate(count: int, model: str) -> None:
    if not 1 <= count <= 16:
        raise ValueError(f"simulated GPU count {count} out of range: expected 1-16")
    if model_name(model) not in MODELS:
        raise ValueError(f"unknown simulated GPU model {model!r}; choose from: {', '.join(MODELS)}")


@functools.lru_cache(maxsize=4096)  # called per GPU and kernel on every sample: hash each id once
def _stable_fraction(text: str) -> float:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big") / 2**64


class SimulatedBackend(GPUBackend):
    """`count` simulated GPUs of one model. Deterministic for a given sequence of (time, kernels)."""

    name = "simulated"
    simulated = True

    def __init__(self, count: int = 1, model: str = DEFAULT_MODEL) -> None:
        validate(count, model)
        self.count = count
        model = model_name(model)
        self.model = MODELS[model]
        self.uuids = [f"GPU-{uuidlib.uuid5(uuidlib.NAMESPACE_URL, f'gpuburst-sim/{model}/{i}')}" for i in range(count)]
        self._lock = threading.Lock()
        self._busy_seconds: dict[str, float] = {}
        self._last_seen: dict[str, tuple[float, bool]] = {}
        self._gpu_of: dict[str, int] = {}  # kernel id -> GPU, for the kernels seen last

    def gpu_of(self, kernel_id: str) -> int:
        """The simulated GPU a kernel runs on (stable for the kernel's life)."""
        known = self._gpu_of.get(kernel_id)
        if known is None:
            known = self._gpu_of[kernel_id] = int(_stable_fraction(kernel_id) * self.count)
        return known

    def _advance(self, kernels: Sequence[KernelRef], now: float) -> None:
        """Accumulate busy time per kernel; forget kernels that are gone."""
        live = {k.kernel_id for k in kernels}
        for kid in list(self._last_seen):
            if kid not in live:
                del self._last_seen[kid]
                self._busy_seconds.pop(kid, None)
                self._gpu_of.pop(kid, None)
        for k in kernels:
            busy = k.execution_state in BUSY_STATES
            previous = self._last_seen.get(k.kernel_id)
            if previous is not None and previous[1] and now > previous[0]:
                self._busy_seconds[k.kernel_id] = self._busy_seconds.get(k.kernel_id, 0.0) + (now - previous[0])
            self._last_seen[k.kernel_id] = (now, busy)

    def kernel_memory(self, kernel_id: str) -> int:
        grown = KERNEL_BASE_MEMORY + KERNEL_GROWTH_PER_BUSY_S * self._busy_seconds.get(kernel_id, 0.0)
        return int(min(grown, KERNEL_MEMORY_SHARE_CAP * self.model.memory_total_bytes))

    def read_devices(self, kernels: Sequence[KernelRef], now: float) -> list[GPUReading]:
        with self._lock:
            self._advance(kernels, now)
            readings = []
            by_gpu: list[list[KernelRef]] = [[] for _ in self.uuids]
            for k in kernels:
                by_gpu[self.gpu_of(k.kernel_id)].append(k)
            for i, uuid in enumerate(self.uuids):
                mine = by_gpu[i]
                utilization = 0.0
                for k in mine:
                    if k.execution_state in BUSY_STATES:
                        phase = 2 * math.pi * _stable_fraction(k.kernel_id)
                        # A training-like curve: high plateau with a slow ripple (period 17 s).
                        utilization += 0.6 + 0.3 * (0.5 + 0.5 * math.sin(2 * math.pi * now / 17.0 + phase))
                utilization = round(min(utilization, 1.0), 4)
                used = min(
                    sum(self.kernel_memory(k.kernel_id) for k in mine if k.pid is not None),
                    self.model.memory_total_bytes,
                )
                power = self.model.idle_power_w + utilization * (self.model.max_power_w - self.model.idle_power_w)
                readings.append(
                    GPUReading(
                        index=i,
                        uuid=uuid,
                        name=self.model.name,
                        mig=self.model.mig,
                        parent_uuid=None,
                        utilization=utilization,
                        utilization_note=None,
                        memory_used_bytes=used,
                        memory_total_bytes=self.model.memory_total_bytes,
                        temperature_c=int(round(32 + 45 * utilization)),
                        power_w=round(power, 1),
                    )
                )
            return readings

    def read_processes(self, kernels: Sequence[KernelRef], now: float) -> list[GPUProcess]:
        with self._lock:
            return [
                GPUProcess(
                    pid=k.pid,
                    gpu_uuid=self.uuids[self.gpu_of(k.kernel_id)],
                    memory_used_bytes=self.kernel_memory(k.kernel_id),
                )
                for k in kernels
                if k.pid is not None
            ]
