"""`gpuburst demo --gpus auto|real|simulated` (NVML faked): what the banner says was found, the
refusal of `real` without a GPU, and the hub config that lets servers and GPU kernels on this
machine's GPUs read NVML while those on donors stay simulated."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pynvml
import pytest
from kubernetes_asyncio.client import V1Container, V1EnvVar, V1Pod, V1PodSpec
from traitlets.config import Config

from jupyter_gpuburst import demo, demo_cli
from jupyter_gpuburst.gpu.testing import FakeGPU, FakeMIG, FakeNVML
from jupyter_gpuburst.hub.ports import free_port
from jupyter_gpuburst.sim import hostgpus
from jupyter_gpuburst.sim.cli import main as sim_main

GiB = 1 << 30
H100 = "NVIDIA H100 80GB HBM3"


def one_h100(monkeypatch) -> hostgpus.HostGPUs:
    FakeNVML(gpus=[FakeGPU("GPU-1111", H100, memory_total=80 * GiB)]).install(monkeypatch.setattr)
    host, _ = hostgpus.host_gpus("auto")
    return host


def test_the_banner_says_what_auto_found_and_how_to_turn_it_off(monkeypatch):
    host = one_h100(monkeypatch)
    _, found = hostgpus.host_gpus("auto")
    out = demo.banner(demo.DemoOptions(), "http://127.0.0.1:1", Path("/k"), ["donor-1"], host, found)
    assert "origin: this machine's 1 × NVIDIA H100 80GB HBM3 (80 GiB) + 1 simulated GPU as 7 MIG 1g.10gb slices;" in out
    assert "GPUs:   this machine's 1 × NVIDIA H100 80GB HBM3 (80 GiB), on the origin (--gpus simulated turns this off)" in out
    # one real GPU: the steps pick '1 GPU', and the second student bursts to the donor
    assert "student1, pick '1 GPU' and start: the server lands on the origin." in out
    assert "student2, pick '1 GPU' and start: the server lands on donor-1, a donor." in out
    assert "this machine's own on the origin, simulated on donors" in out


def test_without_a_gpu_the_banner_says_so_and_nothing_else_changes(monkeypatch):
    FakeNVML(init_error=pynvml.NVMLError_DriverNotLoaded).install(monkeypatch.setattr)
    host, found = hostgpus.host_gpus("auto")
    assert host is None
    out = demo.banner(demo.DemoOptions(), "http://127.0.0.1:1", Path("/k"), ["donor-1"], host, found)
    assert "origin: 2 GPUs + 1 GPU as 7 MIG 1g.10gb slices;" in out
    assert "GPUs:   simulated: NVML finds no GPU here (NVIDIA driver not loaded (no GPU attached to this server))" in out
    assert demo.real_gpus(None) == {}


def test_real_without_a_gpu_is_refused_before_anything_starts(monkeypatch, capsys, tmp_path):
    fake = FakeNVML(init_error=pynvml.NVMLError_LibraryNotFound).install(monkeypatch.setattr)
    assert demo_cli.main(["--gpus", "real", "--port", str(free_port()), "--state-dir", str(tmp_path / "state")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        "gpuburst demo: --gpus real, but NVML finds no GPU here: no NVIDIA driver found (libnvidia-ml.so.1 missing);"
        " use --gpus auto or --gpus simulated"
    )
    assert not (tmp_path / "state").exists()
    assert sim_main(["--gpus", "real", "--kubeconfig-out", str(tmp_path / "kc")]) == 2
    assert "gpuburst sim: --gpus real, but NVML finds no GPU here" in capsys.readouterr().err
    assert not (tmp_path / "kc").exists()
    assert fake.calls["nvmlInit"] == 2
    with pytest.raises(ValueError, match="--gpus must be one of auto, real, simulated"):
        demo.DemoOptions(gpus="cuda")


def load_demo_config(monkeypatch, tmp_path, real: dict) -> dict:
    """Run demo_config.py as JupyterHub would, with the environment `gpuburst demo` gives it."""
    for name, value in {
        "GPUBURST_DEMO_STATE_DIR": str(tmp_path),
        "GPUBURST_DEMO_PORT": "1",
        "GPUBURST_DEMO_HUB_PORT": "2",
        "GPUBURST_DEMO_PROXY_API_PORT": "3",
        "GPUBURST_DEMO_PASSWORD": "x",
        "GPUBURST_DEMO_ADMIN_PASSWORD": "a" * 32,
        "GPUBURST_DEMO_GPU_PRODUCTS": json.dumps(demo.gpu_products(demo.federation_config(demo.DemoOptions()))),
        "GPUBURST_DEMO_REAL_GPUS": json.dumps(real),
    }.items():
        monkeypatch.setenv(name, value)
    config = Config()
    namespace = {"get_config": lambda: config, "__file__": str(demo.DEMO_CONFIG)}
    exec(compile(demo.DEMO_CONFIG.read_text(), str(demo.DEMO_CONFIG), "exec"), namespace)
    return config


def server_pod(env: dict[str, str]) -> V1Pod:
    container = V1Container(name="notebook", env=[V1EnvVar(name=k, value=v) for k, v in env.items()])
    return V1Pod(spec=V1PodSpec(containers=[container]))


def test_servers_and_kernels_on_this_machines_gpus_read_nvml_and_donors_stay_simulated(monkeypatch, tmp_path):
    host = one_h100(monkeypatch)
    config = load_demo_config(monkeypatch, tmp_path, demo.real_gpus(host))
    hook = config.KubeSpawner.modify_pod_hook
    env = {"JUPYTER_GPUBURST_BACKEND": "simulated", "JUPYTER_GPUBURST_SIM_GPUS": "1", "OTHER": "kept"}

    def placed(site: str, resource: str = "nvidia.com/gpu") -> dict[str, str]:
        spawner = SimpleNamespace(gpuburst_placement={"site": site, "resource": resource})
        return {e.name: e.value for e in hook(spawner, server_pod(env)).spec.containers[0].env}

    assert placed("origin") == {"JUPYTER_GPUBURST_BACKEND": "nvml", "OTHER": "kept"}
    donor = placed("donor-1")
    assert donor["JUPYTER_GPUBURST_BACKEND"] == "simulated" and donor["JUPYTER_GPUBURST_SIM_MODEL"] == "NVIDIA-H100-80GB-HBM3"
    # the origin's simulated MIG node stays simulated beside the real GPU
    assert placed("origin", "nvidia.com/mig-1g.10gb")["JUPYTER_GPUBURST_BACKEND"] == "simulated"

    kernel_hook = config.GPUKernelSettings.modify_pod_hook

    def kernel(site: str) -> dict[str, str]:
        pod = {"spec": {"containers": [{"name": "kernel", "env": [{"name": "JUPYTER_GPUBURST_BACKEND", "value": "simulated"}]}]}}
        out = kernel_hook(pod, SimpleNamespace(site=site, resource="nvidia.com/gpu"))
        return {e["name"]: e["value"] for e in out["spec"]["containers"][0]["env"]}

    assert kernel("origin") == {"JUPYTER_GPUBURST_BACKEND": "nvml"}
    assert kernel("donor-1")["JUPYTER_GPUBURST_BACKEND"] == "simulated"


def test_without_real_gpus_the_hub_config_is_as_before(monkeypatch, tmp_path):
    config = load_demo_config(monkeypatch, tmp_path, {})
    spawner = SimpleNamespace(gpuburst_placement={"site": "origin", "resource": "nvidia.com/gpu"})
    pod = config.KubeSpawner.modify_pod_hook(spawner, server_pod({"JUPYTER_GPUBURST_BACKEND": "simulated"}))
    env = {e.name: e.value for e in pod.spec.containers[0].env}
    assert env == {"JUPYTER_GPUBURST_BACKEND": "simulated", "JUPYTER_GPUBURST_SIM_MODEL": "NVIDIA-A100-SXM4-40GB"}


def test_a_mig_host_replaces_the_simulated_slices_and_its_pods_read_nvml(monkeypatch, tmp_path):
    slices = [FakeMIG(f"MIG-{i}", f"{H100} MIG 1g.10gb", 0, 10 * GiB, i) for i in range(1, 8)]
    FakeNVML(gpus=[FakeGPU("GPU-mig", H100, memory_total=80 * GiB, mig=slices)]).install(monkeypatch.setattr)
    host, _ = hostgpus.host_gpus("auto")
    assert demo.real_gpus(host) == {"origin": ["nvidia.com/mig-1g.10gb"]}
    out = demo.banner(demo.DemoOptions(), "http://127.0.0.1:1", Path("/k"), ["donor-1"], host, "x")
    assert "origin: this machine's 1 × NVIDIA H100 80GB HBM3 (80 GiB); MIG slices: 7 × 1g.10gb;" in out
    assert "simulated GPU as 7 MIG" not in out
    config = load_demo_config(monkeypatch, tmp_path, demo.real_gpus(host))
    spawner = SimpleNamespace(gpuburst_placement={"site": "origin", "resource": "nvidia.com/mig-1g.10gb"})
    pod = config.KubeSpawner.modify_pod_hook(spawner, server_pod({"JUPYTER_GPUBURST_BACKEND": "simulated"}))
    assert {e.name: e.value for e in pod.spec.containers[0].env} == {"JUPYTER_GPUBURST_BACKEND": "nvml"}


def test_gpus_default_comes_from_the_environment(monkeypatch, tmp_path):
    # the suite sets it to "simulated" for every test; a GPU machine's own runs may set "real"
    assert demo_cli.build_parser().parse_args([]).gpus == "simulated"
    monkeypatch.setenv(hostgpus.GPUS_MODE_ENV, "real")
    assert demo_cli.build_parser().parse_args([]).gpus == "real"
    monkeypatch.setenv(hostgpus.GPUS_MODE_ENV, "cuda")
    assert sim_main(["--kubeconfig-out", str(tmp_path / "kc")]) == 2
