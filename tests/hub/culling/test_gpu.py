"""GPU idle culling on a real GPU (opt-in: skips where NVML finds no GPU, or torch has no CUDA).

A process running matrix products on the GPU is never culled, and one that holds GPU memory but
sleeps is, judged from real NVML readings by the kernel pod's own reporter and the hub's policy.
The figures this prints (-s) go in benchmarks/README.md with the machine named.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from helpers.figures import record
from helpers.programs import GPU_WORKER

from jupyter_gpuburst.hub.culling.policy import decide
from jupyter_gpuburst.hub.culling.settings import GPUCullingSettings
from jupyter_gpuburst.hub.culling.store import SignalStore
from jupyter_gpuburst.kernel.gpu import KernelGPUReporter

pytestmark = pytest.mark.gpu

TIMEOUT_S = 10.0
WATCH_S = TIMEOUT_S + 5


def nvml_backend():
    try:
        import pynvml

        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except Exception as exc:  # noqa: BLE001 - no driver, no GPU, no pynvml
        pytest.skip(f"NVML finds no GPU here: {exc}")
    from jupyter_gpuburst.gpu.nvml import NVMLBackend

    backend = NVMLBackend()
    backend.open()
    return backend


def watch(mode: str) -> dict:
    """Run a worker in ``mode`` and judge it every second for WATCH_S seconds, as the hub would."""
    backend = nvml_backend()
    worker = subprocess.Popen(
        [sys.executable, "-c", GPU_WORKER, mode, str(1 << 28)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        line = worker.stdout.readline().strip()
        if line.startswith("skip:"):
            pytest.skip(line)
        assert line == "ready", line
        reporter = KernelGPUReporter(backend, f"worker-{mode}")
        settings = GPUCullingSettings(enabled=True, timeout_seconds=TIMEOUT_S, warning_seconds=3, period_seconds=1)
        policy = settings.policy("kernel", "")
        store = SignalStore(stale_after_s=3)
        actions, utilizations, first_stop = [], [], None
        start = time.monotonic()
        seq = 0
        while time.monotonic() - start < WATCH_S:
            report = reporter.sample()
            utilizations.append(report["utilization"])
            seq += 1
            store.report(
                "student",
                {"server_name": "", "boot": "gpu", "seq": seq, "gpu_idle_s": reporter.report()["busy_ago_s"], "basis": reporter.busy_basis},
                lambda r, s: False,
            )
            signal = store.get("student", "", "server")
            decision = decide(
                signal, store.state(signal, time.time()), policy, time.time(), age_s=None, site_kind="origin", groups=frozenset()
            )
            actions.append(decision.action)
            if decision.action == "stop" and first_stop is None:
                first_stop = time.monotonic() - start
            time.sleep(1)
        name = backend.read_devices([], time.time())[0].name
        return {
            "mode": mode,
            "gpu": name,
            "basis": reporter.busy_basis,
            "actions": actions,
            "first_stop_s": first_stop,
            "utilization_max": max(u for u in utilizations if u is not None) if any(u is not None for u in utilizations) else None,
        }
    finally:
        worker.stdin.close()
        worker.wait(timeout=30)
        backend.close()


def test_a_kernel_running_matrix_products_is_never_culled():
    result = watch("compute")
    record("culling_busy_kernel", result)
    assert "stop" not in result["actions"] and "warn" not in result["actions"], result
    assert result["basis"] != "utilization" or result["utilization_max"] >= 0.5


def test_a_kernel_that_sleeps_on_its_gpu_is_culled_after_the_timeout():
    result = watch("sleep")
    record("culling_sleeping_kernel", result)
    assert result["first_stop_s"] is not None, result
    # within one sampling period (1 s here) of the timeout, plus the sample's own second
    assert TIMEOUT_S <= result["first_stop_s"] <= TIMEOUT_S + 2.5, result
