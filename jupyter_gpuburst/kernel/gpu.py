"""A GPU kernel's own GPU use, measured in its pod and answered over the kernel's own channel.

The user's server cannot see a remote kernel's GPU (it runs on another node, maybe another
cluster), and it must not ask Kubernetes. So the kernel pod measures itself: a thread samples the
pod's GPUs (NVML, or the simulated backend in the emulator) and the kernel adds the latest figures
to its ``usage_reply`` (Jupyter's ``usage_request`` on the control channel, as
jupyter-resource-usage asks it). That channel is signed with the kernel's own key, so only the
kernel's owner can ask, and nothing new listens in the pod.

A kernel pod holds its GPUs (whole GPUs or MIG slices) alone, so the devices' memory in use is
the kernel's. The reply's ``gpu`` field: ``{"backend", "simulated", "reason", "sampled_at",
"memory_used_bytes", "memory_total_bytes", "utilization", "devices": [...]}``.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any

from jupyter_gpuburst.core import keys
from jupyter_gpuburst.core.keys import BACKEND_ENV, GPU_COUNT_ENV, KERNEL_ID_ENV, SIM_GPUS_ENV, SIM_MODEL_ENV
from jupyter_gpuburst.gpu.backend import MEMORY_ACTIVITY_BYTES, GPUBackend, KernelRef
from jupyter_gpuburst.gpu.select import open_backend

log = logging.getLogger(__name__)

PERIOD_S = 1.0


class KernelGPUReporter:
    """Samples the pod's GPUs every ``period_s`` in a daemon thread; ``report()`` reads the last."""

    def __init__(self, backend: GPUBackend, kernel_id: str, period_s: float = PERIOD_S) -> None:
        self.backend = backend
        self.kernel_id = kernel_id
        self.period_s = period_s
        self.busy = False
        # GPU idleness for the hub's culler: when the GPU or the kernel was last busy, on this
        # pod's monotonic clock (reported as an age, so the hub's clock need not agree)
        self.threshold = 0.05
        self.busy_at = time.monotonic()
        self.busy_basis = "utilization"
        # when the first cell began (monotonic; None until one ran): a lab's report times a
        # student from asking for a GPU kernel to it (hub/labs/report.py)
        self.first_cell_at: float | None = None
        self._busy_last_sample = False
        self._memory_used: int | None = None
        self._latest: dict[str, Any] = self._empty(getattr(backend, "reason", None))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _empty(self, reason: str | None) -> dict[str, Any]:
        return {
            "backend": self.backend.name,
            "simulated": bool(self.backend.simulated),
            "reason": reason,
            "sampled_at": None,
            "memory_used_bytes": None,
            "memory_total_bytes": None,
            "utilization": None,
            "devices": [],
        }

    def sample(self, now: float | None = None) -> dict[str, Any]:
        """Read the devices once (the simulated ones follow this kernel's busy time)."""
        me = KernelRef(self.kernel_id, "", None, os.getpid(), "busy" if self.busy else "idle")
        try:
            readings = self.backend.read_devices([me], time.time() if now is None else now)
        except Exception as exc:  # noqa: BLE001 - telemetry never breaks the kernel
            log.debug("GPU sample failed", exc_info=True)
            self._latest = self._empty(f"GPU telemetry failed ({exc.__class__.__name__})")
            return self._latest
        devices = [
            {
                "index": r.index,
                "uuid": r.uuid,
                "name": r.name,
                "mig": r.mig,
                "memory_used_bytes": r.memory_used_bytes,
                "memory_total_bytes": r.memory_total_bytes,
                "utilization": r.utilization,
            }
            for r in readings
        ]
        utilizations = [d["utilization"] for d in devices if d["utilization"] is not None]
        self._note_activity(devices, utilizations)
        self._latest = {
            **self._empty(None),
            "sampled_at": time.time(),
            "memory_used_bytes": sum(d["memory_used_bytes"] for d in devices) if devices else None,
            "memory_total_bytes": sum(d["memory_total_bytes"] for d in devices) if devices else None,
            "utilization": round(sum(utilizations) / len(utilizations), 4) if utilizations else None,
            "devices": devices,
        }
        return self._latest

    def _note_activity(self, devices: list[dict[str, Any]], utilizations: list[float]) -> None:
        busy = self.busy
        if devices and len(utilizations) == len(devices):
            self.busy_basis = "utilization"
            busy = busy or max(utilizations) >= self.threshold
        elif devices:
            # NVML reads no utilization (a MIG slice without GPM): memory activity decides
            self.busy_basis = "memory"
            used = sum(d["memory_used_bytes"] for d in devices)
            busy = busy or (self._memory_used is not None and abs(used - self._memory_used) > MEMORY_ACTIVITY_BYTES)
            self._memory_used = used
        else:
            self.busy_basis = "kernel"
        # the first idle sample after a busy one also counts as busy: the GPU went idle somewhere
        # since the last sample, and counting from here makes a stop at most one sample late,
        # never before its timeout
        if busy or self._busy_last_sample:
            self.busy_at = time.monotonic()
        self._busy_last_sample = busy

    def report(self) -> dict[str, Any]:
        report = dict(self._latest)
        if self.busy:
            self.busy_at = time.monotonic()
        report["busy_ago_s"] = round(time.monotonic() - self.busy_at, 1)
        report["busy_basis"] = self.busy_basis
        report["first_cell_ago_s"] = None if self.first_cell_at is None else round(time.monotonic() - self.first_cell_at, 1)
        return report

    @property
    def running(self) -> bool:
        """Sampling: a GPU backend opened (without one, the report says why and never changes)."""
        return self._thread is not None

    def start(self) -> None:
        if self._thread is None and not isinstance(self._latest.get("reason"), str):
            self._thread = threading.Thread(target=self._run, name="gpuburst-gpu-sampler", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.period_s)


def reporter_from_env(environ: dict[str, str] | None = None) -> KernelGPUReporter:
    """The pod's reporter: backend from ``$JUPYTER_GPUBURST_BACKEND`` (default auto: NVML when
    the pod sees a GPU), simulated GPUs as many as the kernel holds."""
    environ = dict(os.environ) if environ is None else environ
    name = environ.get(BACKEND_ENV, "auto") or "auto"
    count = environ.get(SIM_GPUS_ENV) or environ.get(GPU_COUNT_ENV) or "1"
    try:
        backend = open_backend(name, sim_gpus=max(1, min(16, int(count))), sim_model=environ.get(SIM_MODEL_ENV))
    except ValueError as exc:
        from jupyter_gpuburst.gpu.backend import NoGPUBackend

        backend = NoGPUBackend(str(exc))
    return KernelGPUReporter(backend, environ.get(KERNEL_ID_ENV) or environ.get("HOSTNAME", "kernel"))


def install_in_kernel(kernel: Any, shell: Any, reporter: KernelGPUReporter) -> None:
    """Follow the kernel's busy time (for the simulated GPU) and answer ``usage_request`` with GPU use."""

    def busy(*_args: Any) -> None:
        reporter.busy = True
        if reporter.first_cell_at is None:
            reporter.first_cell_at = time.monotonic()

    def idle(*_args: Any) -> None:
        reporter.busy = False
        reporter.busy_at = time.monotonic()  # the cell ran until now
        if reporter.running:
            reporter.sample()  # the figure right after a cell is the one the student looks for

    if shell is not None:
        shell.events.register("pre_run_cell", busy)
        shell.events.register("post_run_cell", idle)

    async def usage_request(stream: Any, ident: Any, parent: Any) -> None:
        threshold = (parent.get("content") or {}).get(keys.BUSY_THRESHOLD_FIELD) if isinstance(parent, dict) else None
        if isinstance(threshold, int | float) and not isinstance(threshold, bool) and 0 <= threshold < 1:
            reporter.threshold = float(threshold)
        content: dict[str, Any] = {"hostname": socket.gethostname(), "pid": os.getpid(), "gpu": reporter.report()}
        try:
            import psutil

            content["kernel_memory"] = psutil.Process().memory_info().rss
            content["cpu_count"] = psutil.cpu_count(logical=True)
        except Exception:  # noqa: BLE001 - psutil is optional in kernel images
            content["cpu_count"] = os.cpu_count()
        kernel.session.send(stream, "usage_reply", content, parent, ident)

    # replaces ipykernel's handler: same reply fields a client reads (host, pid, memory), plus GPU
    kernel.control_handlers["usage_request"] = usage_request
    reporter.start()
