"""Backend selection: NVML when it initialises; simulated only when asked for; else a reason."""

from __future__ import annotations

import logging

from jupyter_gpuburst.gpu.backend import BACKEND_NAMES, GPUBackend, GPUUnavailable, NoGPUBackend

log = logging.getLogger(__name__)


def open_backend(name: str, sim_gpus: int = 1, sim_model: str | None = None) -> GPUBackend:
    """An opened backend for `name` ("auto" | "nvml" | "simulated" | "none").

    Never raises for a missing GPU: that case returns a NoGPUBackend carrying the reason, so the
    API can say "no GPU visible" and why. Blocking (nvmlInit): call it off the event loop.
    """
    if name not in BACKEND_NAMES:
        raise ValueError(f"unknown GPU backend {name!r}; choose from {', '.join(BACKEND_NAMES)}")
    if name == "none":
        return NoGPUBackend()
    if name == "simulated":
        from jupyter_gpuburst.gpu.simulated import DEFAULT_MODEL, SimulatedBackend

        return SimulatedBackend(sim_gpus, sim_model or DEFAULT_MODEL)
    from jupyter_gpuburst.gpu.nvml import NVMLBackend

    backend = NVMLBackend()
    try:
        backend.open()
    except GPUUnavailable as exc:
        log.info("GPU telemetry: %s", exc.reason)
        return NoGPUBackend(exc.reason)
    return backend
