"""The host's GPUs on the emulated origin (`--gpus auto|real|simulated`), with NVML faked at the
pynvml boundary: node labels and resources as the device plugin and GPU feature discovery write
them, MIG slices as mixed-strategy resources, and the kubelet handing each pod devices of its own."""

from __future__ import annotations

import re
import sys

import pynvml
import pytest

from jupyter_gpuburst.gpu.testing import FakeGPU, FakeMIG, FakeNVML
from jupyter_gpuburst.sim import hostgpus
from jupyter_gpuburst.sim.cluster import Cluster
from jupyter_gpuburst.sim.config import ClusterConfig, ConfigError, NodeConfig, load_config, parse_config
from jupyter_gpuburst.sim.testing import running_federation, wait_for_pod, wait_until

GiB = 1 << 30
PY = sys.executable
H100 = "NVIDIA H100 80GB HBM3"


def two_h100s() -> list[FakeGPU]:
    return [FakeGPU("GPU-1111", H100, memory_total=80 * GiB), FakeGPU("GPU-2222", H100, memory_total=80 * GiB)]


def mig_h100() -> FakeGPU:
    slices = [FakeMIG(f"MIG-{i}", f"{H100} MIG 1g.10gb", 0, 10 * GiB, i) for i in range(1, 4)]
    slices.append(FakeMIG("MIG-big", f"{H100} MIG 3g.40gb", 0, 40 * GiB, 9))
    return FakeGPU("GPU-mig", H100, memory_total=80 * GiB, mig=slices)


def test_whole_gpus_are_advertised_as_the_device_plugin_and_feature_discovery_do(monkeypatch):
    fake = FakeNVML(gpus=two_h100s()).install(monkeypatch.setattr)
    host, said = hostgpus.host_gpus("auto")
    assert host is not None
    assert host.resources() == {"nvidia.com/gpu": 2}
    assert host.device_ids() == {"nvidia.com/gpu": ("GPU-1111", "GPU-2222")}
    assert host.labels() == {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.count": "2",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.memory": "81920",
    }
    assert "2 × NVIDIA H100 80GB HBM3 (80 GiB)" in said and "--gpus simulated" in said
    assert fake.calls["nvmlShutdown"] == fake.calls["nvmlInit"] == 1  # nothing held open


def test_nvidia_visible_devices_keeps_the_demo_to_some_of_the_machines_gpus(monkeypatch):
    FakeNVML(gpus=two_h100s()).install(monkeypatch.setattr)
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "GPU-2222")
    host, _ = hostgpus.host_gpus("real")
    assert host.device_ids() == {"nvidia.com/gpu": ("GPU-2222",)} and host.labels()["nvidia.com/gpu.count"] == "1"
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "0")
    assert hostgpus.host_gpus("auto")[0].device_ids() == {"nvidia.com/gpu": ("GPU-1111",)}
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "none")
    host, said = hostgpus.host_gpus("auto")
    assert host is None and said.endswith("(NVML found 0 devices that NVIDIA_VISIBLE_DEVICES lists)")


def test_a_gpu_in_mig_mode_is_advertised_as_its_slices_mixed_strategy(monkeypatch):
    FakeNVML(gpus=[mig_h100(), FakeGPU("GPU-whole", H100, memory_total=80 * GiB)]).install(monkeypatch.setattr)
    host, said = hostgpus.host_gpus("real")
    assert host.resources() == {"nvidia.com/mig-1g.10gb": 3, "nvidia.com/mig-3g.40gb": 1, "nvidia.com/gpu": 1}
    assert host.device_ids()["nvidia.com/mig-1g.10gb"] == ("MIG-1", "MIG-2", "MIG-3")
    assert "GPU-mig" not in str(host.device_ids())  # the parent is given out only as its slices
    labels = host.labels()
    assert labels["nvidia.com/mig.strategy"] == "mixed"
    assert labels["nvidia.com/gpu.count"] == "2"
    assert labels["nvidia.com/mig-1g.10gb.count"] == "3" and labels["nvidia.com/mig-1g.10gb.memory"] == "10240"
    assert labels["nvidia.com/mig-3g.40gb.count"] == "1"
    assert "MIG slices: 3 × 1g.10gb, 1 × 3g.40gb" in said


def test_simulated_never_asks_nvml_and_auto_without_a_gpu_changes_nothing(monkeypatch):
    fake = FakeNVML(init_error=pynvml.NVMLError_LibraryNotFound).install(monkeypatch.setattr)
    assert hostgpus.host_gpus("simulated") == (None, "simulated (--gpus simulated)")
    assert fake.calls["nvmlInit"] == 0
    host, said = hostgpus.host_gpus("auto")
    assert host is None and "no NVIDIA driver found" in said
    with pytest.raises(hostgpus.HostGPUError, match=r"^--gpus real, but NVML finds no GPU here: no NVIDIA driver found"):
        hostgpus.host_gpus("real")
    with pytest.raises(ValueError, match="--gpus must be one of auto, real, simulated"):
        hostgpus.host_gpus("cuda")


def test_the_host_gpus_replace_the_origins_gpu_node_and_donors_stay_simulated(monkeypatch):
    FakeNVML(gpus=[mig_h100()]).install(monkeypatch.setattr)
    host, _ = hostgpus.host_gpus("auto")
    config = parse_config(
        {
            "origin": {
                "nodes": [
                    {
                        "name": "origin-gpu",
                        "resources": {"nvidia.com/gpu": 2},
                        "labels": {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"},
                    },
                    {"name": "origin-mig", "resources": {"nvidia.com/mig-1g.10gb": 7}},
                    {"name": "origin-cpu"},
                ]
            },
            "donors": [{"name": "d", "nodes": [{"name": "d-gpu", "resources": {"nvidia.com/gpu": 4}}], "grant": {"nvidia.com/gpu": 4}}],
        }
    )
    out = hostgpus.with_host_gpus(config, host)
    assert [n.name for n in out.origin.nodes] == ["origin-gpu", "origin-cpu"]  # the host's slices replace the simulated ones
    node = out.origin.nodes[0]
    assert node.resources == {"nvidia.com/mig-1g.10gb": 3, "nvidia.com/mig-3g.40gb": 1}
    assert node.labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert node.devices["nvidia.com/mig-3g.40gb"] == ("MIG-big",)
    assert out.donors == config.donors
    # with no GPU node on the origin, one is added
    plain = parse_config({"origin": {"nodes": [{"name": "cpu"}]}})
    assert [n.name for n in hostgpus.with_host_gpus(plain, host).origin.nodes] == ["origin-gpu", "cpu"]


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        ({"nvidia.com/gpu": ["GPU-a"]}, "nodes[0].devices.nvidia.com/gpu: lists 1 devices but the node offers 2"),
        ({"nvidia.com/gpu": ["GPU-a", "GPU-a"]}, "nodes[0].devices.nvidia.com/gpu: lists a device twice"),
        ({"amd.com/gpu": ["x", "y"]}, "nodes[0].devices.amd.com/gpu: is not one of the node's resources"),
        ({"nvidia.com/gpu": ["GPU-a,GPU-b", "c"]}, "must be a list of device IDs"),
        (["GPU-a"], "nodes[0].devices: must be a mapping"),
    ],
)
def test_bad_device_lists_are_refused_with_the_field_named(devices, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_config({"origin": {"nodes": [{"name": "n", "resources": {"nvidia.com/gpu": 2}, "devices": devices}]}}, "f.yaml")


def test_the_shipped_config_lists_no_devices():
    assert all(not n.devices for n in load_config().origin.nodes)


def gpu_pod(name: str, gpus: int = 1, *, exits: bool = False, resource: str = "nvidia.com/gpu") -> dict:
    keys = "('NVIDIA_VISIBLE_DEVICES', 'CUDA_VISIBLE_DEVICES', 'LD_LIBRARY_PATH')"
    script = f"import os,time; print(*(os.environ.get(k) for k in {keys}), flush=True)"
    if not exits:
        script += "; time.sleep(120)"
    limits = {resource: str(gpus)} if gpus else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "main", "image": "python:3.11", "command": [PY, "-c", script], "resources": {"limits": limits}}],
            "terminationGracePeriodSeconds": 1,
            "restartPolicy": "Never",
        },
    }


async def printed(cluster: Cluster, name: str) -> list[str]:
    async def line():
        path = cluster.kubelet.log_path("default", name)
        text = path.read_text().strip() if path else ""
        return text.split() if text else None

    return await wait_until(line, 15, f"{name}'s environment in its log")


@pytest.fixture
async def host_cluster(tmp_path):
    node = NodeConfig(name="gpu", resources={"nvidia.com/gpu": 2}, devices={"nvidia.com/gpu": ("GPU-1111", "GPU-2222")})
    cluster = Cluster(ClusterConfig(name="c", nodes=(node, NodeConfig(name="cpu"))), 57, tmp_path)
    await cluster.start()
    try:
        yield cluster
    finally:
        await cluster.stop()


async def test_each_pod_gets_a_gpu_of_its_own_by_uuid_and_gives_it_back_when_it_goes(host_cluster, monkeypatch):
    # the driver's libraries, where this machine finds them, as the NVIDIA runtime shows them to a GPU container
    monkeypatch.setenv("LD_LIBRARY_PATH", "/usr/local/nvidia/lib64")
    store = host_cluster.store
    store.create("pods", gpu_pod("a"), "default")
    store.create("pods", gpu_pod("b"), "default")
    store.create("pods", gpu_pod("none", 0), "default")
    a, b = await printed(host_cluster, "a"), await printed(host_cluster, "b")
    assert a[0] == a[1] and b[0] == b[1]  # NVIDIA_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES agree
    assert a[2] == b[2] == "/usr/local/nvidia/lib64"
    assert {a[0], b[0]} == {"GPU-1111", "GPU-2222"}  # never two pods on one GPU
    assert await printed(host_cluster, "none") == ["None", "None", "None"]
    # a third waits for a GPU (the scheduler), and gets the one the deleted pod held
    store.create("pods", gpu_pod("c"), "default")
    await wait_for_pod(store, "default", "c", lambda p: any(c.get("reason") == "Unschedulable" for c in p["status"].get("conditions", [])))
    store.delete("pods", "default", "a")
    assert (await printed(host_cluster, "c"))[0] == a[0]
    holders = host_cluster.kubelet.devices.holders()
    assert holders == {
        a[0]: store.get("pods", "default", "c")["metadata"]["uid"],
        b[0]: store.get("pods", "default", "b")["metadata"]["uid"],
    }


async def test_a_pod_that_ends_frees_its_gpu_and_one_the_node_cannot_serve_fails_admission(host_cluster):
    store = host_cluster.store
    store.create("pods", gpu_pod("done", 2, exits=True), "default")
    await wait_for_pod(store, "default", "done", lambda p: p["status"].get("phase") == "Succeeded")
    assert (await printed(host_cluster, "done"))[0] == "GPU-1111,GPU-2222"
    await wait_until(lambda: not host_cluster.kubelet.devices.holders(), 5, "the ended pod's GPUs free")
    # bound by hand past the scheduler (as a pod with spec.nodeName is): the kubelet admits it
    # only with devices free, as the kubelet's device manager does
    store.create("pods", gpu_pod("one"), "default")
    await printed(host_cluster, "one")
    pinned = gpu_pod("pinned", 2)
    pinned["spec"]["nodeName"] = "gpu"
    store.create("pods", pinned, "default")
    pod = await wait_for_pod(store, "default", "pinned", lambda p: p["status"].get("phase") == "Failed")
    assert pod["status"]["reason"] == "UnexpectedAdmissionError"
    assert "requested number of devices unavailable for nvidia.com/gpu. Requested: 2, Available: 1" in pod["status"]["message"]
    assert len(host_cluster.kubelet.devices.holders()) == 1  # the refused pod took nothing
    half = gpu_pod("half")
    half["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "500m"
    half["spec"]["nodeName"] = "gpu"
    store.create("pods", half, "default")
    pod = await wait_for_pod(store, "default", "half", lambda p: p["status"].get("phase") == "Failed")
    assert pod["status"]["message"] == "nvidia.com/gpu must be a whole number of devices, not '500m'"


async def test_the_federation_origin_node_carries_the_host_gpus_and_mig_slices(tmp_path, monkeypatch):
    FakeNVML(gpus=[mig_h100()]).install(monkeypatch.setattr)
    host, _ = hostgpus.host_gpus("auto")
    async with running_federation(hostgpus.with_host_gpus(load_config(), host), tmp_path) as fed:
        node = fed.origin.store.get("nodes", None, "origin-gpu")
        assert node["status"]["allocatable"]["nvidia.com/mig-1g.10gb"] == "3"
        assert "nvidia.com/gpu" not in node["status"]["allocatable"]
        assert node["metadata"]["labels"]["nvidia.com/mig.strategy"] == "mixed"
        pod = gpu_pod("slice", resource="nvidia.com/mig-3g.40gb")
        fed.origin.store.create("pods", pod, "default")
        assert (await printed(fed.origin, "slice"))[:2] == ["MIG-big", "MIG-big"]
        donor = next(iter(fed.donors.values()))
        assert all(not devs for devs in donor.kubelet.devices.nodes.values())  # donors stay simulated
