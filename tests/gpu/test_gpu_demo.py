"""The demo on this machine's GPU, through the hub: a student's server on the origin's real GPU,
a GPU kernel there, and the next request bursting to the simulated donor.

`test_on_the_real_gpu` (marker ``gpu``: skips where NVML finds no GPU) runs `gpuburst demo
--gpus real` and CUDA code (PyTorch or CuPy, whichever the machine has) in the students' cells,
checks what the panel's API shows, and records the figures benchmarks/README.md asks for
(``helpers.figures``). `test_the_same_paths_with_nvml_faked` runs the same paths everywhere with
NVML faked in the demo's process (so the origin advertises a fake GPU and the kubelet hands it
out): placement, the device the pod gets, the backend its server and kernel read; not the
figures, as the pods' own NVML finds no GPU here.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pynvml
import pytest
from demo.student import Student
from helpers.figures import record

from jupyter_gpuburst import demo
from jupyter_gpuburst.gpu.testing import FakeGPU, FakeNVML
from jupyter_gpuburst.hub.ports import free_port
from jupyter_gpuburst.sim.testing import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

GiB = 1 << 30
FAKE_UUID = "GPU-00000000-fake-4000-8000-000000000001"
KERNEL_NOTE = "Note: this GPU kernel runs on donor-1, a donor cluster"

# A cell: which CUDA library this Python has (PyTorch, else CuPy), or why none can run.
CUDA_LIBRARY = """
def _cuda_library():
    try:
        import torch
        if torch.cuda.is_available():
            return "torch"
    except ImportError:
        pass
    try:
        import cupy
        cupy.cuda.runtime.getDeviceCount()
        return "cupy"
    except Exception:
        return None
print("cuda:", _cuda_library())
"""

# A cell: hold 1 GiB on the GPU and keep it busy with matrix products in a thread, print the
# moment the memory was allocated (the panel must show it soon after).
CUDA_WORK = """
import threading, time
lib = _cuda_library()
if lib == "torch":
    import torch
    held = torch.empty(1 << 30, dtype=torch.uint8, device="cuda"); torch.cuda.synchronize()
    allocated = time.time()
    a = torch.randn(4096, 4096, device="cuda")
    def work():
        global a
        while not stop.is_set():
            a = (a @ a).clamp_(-1, 1); torch.cuda.synchronize()
else:
    import cupy
    held = cupy.empty(1 << 30, dtype=cupy.uint8); cupy.cuda.Device().synchronize()
    allocated = time.time()
    a = cupy.random.randn(4096, 4096, dtype=cupy.float32)
    def work():
        global a
        while not stop.is_set():
            a = cupy.clip(a @ a, -1, 1); cupy.cuda.Device().synchronize()
stop = threading.Event()
threading.Thread(target=work, daemon=True).start()
print("allocated:", allocated)
"""


class Server:
    """A student's server reached through the demo's proxy with the student's cookies (no
    JupyterLab needed: the panel's API and kernels are jupyter_server's)."""

    def __init__(self, student: Student) -> None:
        self.student = student
        self.base = f"{student.base}/user/{student.name}"

    async def login(self) -> None:
        """The hub's OAuth dance, as a browser's first page of the server starts it (any page:
        the files handler is jupyter_server's own, there with or without JupyterLab)."""
        async with self.student.session.get(f"{self.base}/files/") as resp:
            assert f"/user/{self.student.name}/" in str(resp.url), resp.url
        assert self.student._cookie("_xsrf", f"/user/{self.student.name}"), "no xsrf cookie from the server"

    @property
    def headers(self) -> dict[str, str]:
        return {"X-XSRFToken": self.student._cookie("_xsrf", f"/user/{self.student.name}") or ""}

    async def get(self, path: str) -> Any:
        async with self.student.session.get(f"{self.base}/{path}", headers=self.headers) as resp:
            assert resp.status == 200, (resp.status, await resp.text())
            return await resp.json()

    async def start_kernel(self, name: str) -> str:
        async with self.student.session.post(f"{self.base}/api/kernels", json={"name": name}, headers=self.headers) as resp:
            assert resp.status == 201, (resp.status, await resp.text())
            return (await resp.json())["id"]

    async def execute(self, kernel_id: str, code: str, timeout: float = 90) -> str:
        return await self.student.execute(kernel_id, code, timeout)

    async def first_cell(self, kernel: str, code: str) -> tuple[str, str, float]:
        """(kernel id, output, seconds from asking for the kernel to the cell's output)."""
        started = time.monotonic()
        kernel_id = await self.start_kernel(kernel)
        out = await self.execute(kernel_id, code)
        return kernel_id, out, time.monotonic() - started


async def open_server(base: str, name: str, profile: str) -> tuple[Student, Server]:
    student = Student(base, name, demo.DEFAULT_PASSWORD)
    await student.login()
    await student.spawn_form_profiles()
    await student.start(profile)
    await student.wait_ready(90)
    server = Server(student)
    await server.login()
    return student, server


def line_value(out: str, key: str) -> str:
    for line in out.splitlines():
        if line.startswith(f"{key}: "):
            return line[len(key) + 2 :].strip()
    raise AssertionError(f"no '{key}:' line in {out!r}")


async def origin_pod_env(kubeconfig, name_prefix: str) -> tuple[str, dict[str, str]]:
    from jupyter_gpuburst.doctor import connect

    view = connect(str(kubeconfig)).cluster
    pods = [p for p in await asyncio.to_thread(view.list_pods) if p["metadata"]["name"].startswith(name_prefix)]
    assert len(pods) == 1, [p["metadata"]["name"] for p in pods]
    env = {e["name"]: e.get("value", "") for e in pods[0]["spec"]["containers"][0].get("env") or []}
    return pods[0]["spec"]["nodeName"], env


async def run_demo_journey(tmp_path, real: bool) -> dict[str, Any]:
    """Both students' journeys on a demo whose origin has one GPU of this machine's (or a fake's)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    opts = demo.DemoOptions(port=port, state_dir=tmp_path / "state", gpus="real")
    ready, stop = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(demo.run(opts, ready, stop))
    students: list[Student] = []
    figures: dict[str, Any] = {}
    try:
        await asyncio.wait([task, asyncio.create_task(ready.wait())], timeout=90, return_when=asyncio.FIRST_COMPLETED)
        assert ready.is_set(), f"the demo did not start (exit {task.result() if task.done() else 'none'})"
        kubeconfig = tmp_path / "state" / "kubeconfig"

        # 1. A student's server with 1 GPU lands on the origin's GPU: this machine's
        first, server = await open_server(base, "student1", "gpu-1")
        students.append(first)
        placement = await server.get("api/gpuburst/placement")
        assert placement["site"] == "origin", placement
        node, env = await origin_pod_env(kubeconfig, "jupyter-student1")
        assert node == "origin-gpu" and env["JUPYTER_GPUBURST_BACKEND"] == "nvml", (node, env)
        kernel_id, out, _ = await server.first_cell("python3", "import os; print('visible:', os.environ['NVIDIA_VISIBLE_DEVICES'])")
        visible = line_value(out, "visible")
        assert visible.startswith("GPU-") and "," not in visible, out
        if not real:
            assert visible == FAKE_UUID
        # the server's first sample, as the panel's first read after it opens
        sample = await wait_until(lambda: _sampled(server), 30, "the server's first GPU sample", interval=0.1)
        assert reads_nvml(sample, real), sample
        if real:
            out = await server.execute(kernel_id, CUDA_LIBRARY)
            library = line_value(out, "cuda")
            if library == "None":
                pytest.skip("neither PyTorch nor CuPy can run CUDA code in this Python")
            figures["cuda_library"] = library
            assert [g["uuid"] for g in sample["gpus"]] == [visible], sample["gpus"]  # its own GPU only
            allocated = float(line_value(await server.execute(kernel_id, CUDA_WORK), "allocated"))

            async def attributed():
                data = await server.get("api/gpuburst/gpus")
                (entry,) = [k for k in data["kernels"] if k["kernel_id"] == kernel_id]
                used = sum(g["memory_used_bytes"] or 0 for g in entry["gpus"])
                return (data, time.time()) if used >= GiB else None

            data, seen = await wait_until(attributed, 30, "the kernel's GPU memory in the panel's API", interval=0.05)
            figures["server_first_allocation_to_panel_s"] = round(seen - allocated, 3)
            busy = await wait_until(
                lambda: _utilization(server), 30, "the GPU's utilization from its matrix products in the panel's API", interval=0.2
            )
            figures["server_gpu"] = {
                "name": data["gpus"][0]["name"],
                "utilization_seen": busy,
                "memory_used_bytes": data["gpus"][0]["memory_used_bytes"],
            }

        # 2. A second student asking for 1 GPU bursts to the donor, whose GPUs are simulated
        second, donor_server = await open_server(base, "student2", "gpu-1")
        students.append(second)
        placement = await donor_server.get("api/gpuburst/placement")
        assert placement["site"] == "donor-1" and placement["reason"], placement
        donor_sample = await donor_server.get("api/gpuburst/gpus")
        assert donor_sample["simulated"] is True and donor_sample["backend"] == "simulated", donor_sample
        await second.stop()
        await first.stop()  # the origin's GPU is free again: the kubelet took it back

        # 3. Kernel mode: a CPU server's GPU kernel lands on the origin's GPU; a second bursts
        third, kernels = await open_server(base, "student3", "cpu-gpu-kernels")
        students.append(third)
        local_id, _, local_s = await kernels.first_cell("python3", "print(1)")
        gpu_id, out, gpu_s = await kernels.first_cell(
            "gpuburst-gpu-1", "import os; print('visible:', os.environ['NVIDIA_VISIBLE_DEVICES'])"
        )
        assert line_value(out, "visible").startswith("GPU-"), out
        node, env = await origin_pod_env(kubeconfig, "gpuburst-kernel-")
        assert node == "origin-gpu" and env["JUPYTER_GPUBURST_BACKEND"] == "nvml", (node, env)
        figures["kernel_start_to_first_output_s"] = {"gpu_kernel_on_the_real_gpu": round(gpu_s, 2), "local_ipykernel": round(local_s, 2)}

        async def kernel_gpu():
            listed = (await kernels.get("api/gpuburst/kernels"))["kernels"]
            (entry,) = [k for k in listed if k["kernel_id"] == gpu_id]
            return entry if (entry.get("gpu") or {}).get("backend") else None

        entry = await wait_until(kernel_gpu, 30, "the GPU kernel's own figures in the panel's API", interval=0.2)
        assert entry["site"] == "origin" and reads_nvml(entry["gpu"], real), entry
        if real:
            await kernels.execute(gpu_id, CUDA_LIBRARY)
            allocated = float(line_value(await kernels.execute(gpu_id, CUDA_WORK), "allocated"))

            async def kernel_memory():
                listed = (await kernels.get("api/gpuburst/kernels"))["kernels"]
                (entry,) = [k for k in listed if k["kernel_id"] == gpu_id]
                used = (entry.get("gpu") or {}).get("memory_used_bytes") or 0
                return (entry, time.time()) if used >= GiB else None

            entry, seen = await wait_until(kernel_memory, 30, "the GPU kernel's memory in the panel's API", interval=0.05)
            figures["gpu_kernel_first_allocation_to_panel_s"] = round(seen - allocated, 3)
        # the real GPU is the first kernel's: the next GPU kernel bursts to the donor, and says so
        _, out, _ = await kernels.first_cell("gpuburst-gpu-1", "import os; print('site:', os.environ['JUPYTER_GPUBURST_SITE'])")
        assert line_value(out, "site") == "donor-1" and KERNEL_NOTE in out, out
        await third.stop()
        return figures
    finally:
        for student in students:
            await student.close()
        stop.set()
        await asyncio.wait_for(task, 60)


def reads_nvml(figures: dict[str, Any], real: bool) -> bool:
    """Whether a server's or kernel's GPU figures come from NVML: on a GPU machine its readings;
    with NVML faked only in the demo's process, the pod's own NVML saying it finds no driver
    (never the simulated backend)."""
    if figures["simulated"]:
        return False
    if real:
        return figures["backend"] == "nvml" and not figures.get("reason")
    return (figures.get("reason") or "").startswith("no NVIDIA driver found")


async def _sampled(server: Server) -> dict[str, Any] | None:
    data = await server.get("api/gpuburst/gpus")
    return data if data.get("gpus") or data.get("reason") else None


async def _utilization(server: Server) -> float | None:
    data = await server.get("api/gpuburst/gpus")
    value = max((g["utilization"] or 0.0 for g in data["gpus"]), default=0.0)
    return value if value >= 0.2 else None


def _nvml_or_skip() -> None:
    try:
        pynvml.nvmlInit()
        pynvml.nvmlShutdown()
    except pynvml.NVMLError as exc:
        pytest.skip(f"NVML finds no GPU here: {exc}")


@pytest.mark.gpu
async def test_on_the_real_gpu(tmp_path):
    _nvml_or_skip()
    from jupyter_gpuburst.sim.hostgpus import GPU_RESOURCE, host_gpus

    host, found = host_gpus("real")
    if GPU_RESOURCE not in host.resources():
        pytest.skip(f"no whole GPU to give a '1 GPU' server here: {found}")
    figures = await run_demo_journey(tmp_path, real=True)
    figures["found"] = found
    record("demo_on_the_real_gpu", figures)


async def test_the_same_paths_with_nvml_faked(tmp_path, monkeypatch):
    FakeNVML(gpus=[FakeGPU(FAKE_UUID, "NVIDIA H100 80GB HBM3", memory_total=80 * GiB)]).install(monkeypatch.setattr)
    monkeypatch.setenv("GPUBURST_SIM_NETWORK", "shared")  # the demo sets it for its kubelets
    figures = await run_demo_journey(tmp_path, real=False)
    assert "kernel_start_to_first_output_s" in figures
    json.dumps(figures)
