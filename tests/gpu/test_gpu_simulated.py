"""Simulated backend: deterministic curves driven by the running kernels."""

from __future__ import annotations

import pytest

from jupyter_gpuburst.gpu.backend import KernelRef
from jupyter_gpuburst.gpu.simulated import KERNEL_BASE_MEMORY, MODELS, SimulatedBackend, config_from_env


def kernels(state_a: str = "busy", state_b: str = "idle") -> list[KernelRef]:
    return [
        KernelRef("kernel-a", "python3", "a.ipynb", 4242, state_a),
        KernelRef("kernel-b", "python3", None, 4343, state_b),
    ]


def run(backend: SimulatedBackend, steps: int, states=("busy", "idle")):
    out = []
    for t in range(steps):
        out.append(backend.read_devices(kernels(*states), 1000.0 + t))
    return out


def test_deterministic_for_the_same_inputs():
    assert run(SimulatedBackend(2), 20) == run(SimulatedBackend(2), 20)


def test_busy_kernel_raises_its_gpu_and_idle_does_not():
    backend = SimulatedBackend(1)
    busy = backend.read_devices(kernels("busy", "idle"), 10.0)[0]
    idle = SimulatedBackend(1).read_devices(kernels("idle", "idle"), 10.0)[0]
    assert busy.utilization >= 0.6 and idle.utilization == 0.0
    assert busy.power_w > idle.power_w and busy.temperature_c > idle.temperature_c
    assert 0.0 <= busy.utilization <= 1.0


def test_memory_grows_with_busy_time_and_is_bounded():
    backend = SimulatedBackend(1, "Tesla T4")
    first = backend.read_devices(kernels(), 0.0)[0].memory_used_bytes
    assert first == 2 * KERNEL_BASE_MEMORY  # two running kernels, neither busy yet
    later = [backend.read_devices(kernels(), float(t))[0].memory_used_bytes for t in range(1, 400, 10)]
    assert later[0] > first and later == sorted(later)
    assert later[-1] <= MODELS["Tesla T4"].memory_total_bytes


def test_processes_carry_the_kernel_pids_on_the_kernel_gpu():
    backend = SimulatedBackend(4)
    backend.read_devices(kernels(), 0.0)
    procs = backend.read_processes(kernels(), 0.0)
    assert {p.pid for p in procs} == {4242, 4343}
    for p in procs:
        kid = "kernel-a" if p.pid == 4242 else "kernel-b"
        assert p.gpu_uuid == backend.uuids[backend.gpu_of(kid)]
        assert p.memory_used_bytes >= KERNEL_BASE_MEMORY


def test_kernel_without_pid_has_no_process():
    backend = SimulatedBackend(1)
    assert backend.read_processes([KernelRef("k", "remote", None, None, "busy")], 0.0) == []


def test_gone_kernel_releases_memory():
    backend = SimulatedBackend(1)
    run(backend, 5)
    assert backend.read_devices([], 100.0)[0].memory_used_bytes == 0


def test_config_from_env_and_bad_input():
    assert config_from_env({"JUPYTER_GPUBURST_SIM_GPUS": "2", "JUPYTER_GPUBURST_SIM_MODEL": "NVIDIA L4"}) == (
        2,
        "NVIDIA L4",
    )
    with pytest.raises(ValueError, match="expected a whole number"):
        config_from_env({"JUPYTER_GPUBURST_SIM_GPUS": "two"})
    with pytest.raises(ValueError, match="out of range"):
        config_from_env({"JUPYTER_GPUBURST_SIM_GPUS": "0"})
    with pytest.raises(ValueError, match="unknown simulated GPU model 'GTX 480'"):
        SimulatedBackend(1, "GTX 480")


def test_uuids_are_stable_and_distinct():
    a, b = SimulatedBackend(3), SimulatedBackend(3)
    assert a.uuids == b.uuids and len(set(a.uuids)) == 3
    assert all(u.startswith("GPU-") for u in a.uuids)
