"""Attribution of a real running kernel with the simulated backend."""

from __future__ import annotations

import asyncio
import json

import pytest

KERNEL_CONFIG = {"backend": "simulated", "sim_gpus": 2, "sampling_period_s": 0.1, "process_sampling_period_s": 0.5}


async def wait_for_kernel(jp_fetch, kernel_id: str, timeout: float = 20.0) -> dict:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        sample = json.loads((await jp_fetch("api", "gpuburst", "gpus")).body)
        mine = [k for k in sample["kernels"] if k["kernel_id"] == kernel_id]
        if mine and mine[0]["gpus"]:
            return sample
        assert asyncio.get_running_loop().time() < deadline, f"kernel {kernel_id} never showed GPU use: {sample}"
        await asyncio.sleep(0.1)


@pytest.mark.parametrize("gpuburst_config", [KERNEL_CONFIG])
async def test_running_kernel_is_attributed(jp_fetch, jp_serverapp):
    response = await jp_fetch(
        "api",
        "sessions",
        method="POST",
        body=json.dumps({"path": "work/train.ipynb", "type": "notebook", "kernel": {"name": "python3"}}),
    )
    kernel_id = json.loads(response.body)["kernel"]["id"]
    try:
        sample = await wait_for_kernel(jp_fetch, kernel_id)
        (kernel,) = [k for k in sample["kernels"] if k["kernel_id"] == kernel_id]
        assert kernel["name"] == "python3" and kernel["notebook"] == "work/train.ipynb"
        ((gpu,),) = [kernel["gpus"]]
        assert gpu["uuid"] in {g["uuid"] for g in sample["gpus"]}
        assert gpu["memory_used_bytes"] > 0
        on_gpu = next(g for g in sample["gpus"] if g["uuid"] == gpu["uuid"])
        assert on_gpu["memory_used_bytes"] >= gpu["memory_used_bytes"]
        assert sample["unattributed"] == []
        # The simulated process carries the kernel's real pid: attribution went through the pid.
        pid = jp_serverapp.kernel_manager.get_kernel(kernel_id).provisioner.pid
        sampler = jp_serverapp.web_app.settings["gpuburst_sampler"]
        assert pid in {p.pid for p in sampler._processes}
    finally:
        await jp_fetch("api", "kernels", kernel_id, method="DELETE")
    for _ in range(50):
        sample = json.loads((await jp_fetch("api", "gpuburst", "gpus")).body)
        if not any(k["kernel_id"] == kernel_id for k in sample["kernels"]):
            break
        await asyncio.sleep(0.1)
    assert not any(k["kernel_id"] == kernel_id for k in sample["kernels"])
    assert sum(g["memory_used_bytes"] for g in sample["gpus"]) == 0


@pytest.mark.parametrize("gpuburst_config", [KERNEL_CONFIG])
async def test_busy_kernel_drives_its_simulated_gpu(jp_fetch, jp_serverapp):
    km = jp_serverapp.kernel_manager
    kernel_id = await km.start_kernel(kernel_name="python3")
    client = km.get_kernel(kernel_id).client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=30)
        sample = await wait_for_kernel(jp_fetch, kernel_id)
        uuid = next(k for k in sample["kernels"] if k["kernel_id"] == kernel_id)["gpus"][0]["uuid"]

        def utilization(s: dict) -> float:
            return next(g["utilization"] for g in s["gpus"] if g["uuid"] == uuid)

        assert utilization(sample) == 0.0  # idle kernel: memory held, GPU not busy
        client.execute("import time; time.sleep(2.5)")
        busy = 0.0
        for _ in range(40):
            await asyncio.sleep(0.1)
            busy = max(busy, utilization(json.loads((await jp_fetch("api", "gpuburst", "gpus")).body)))
            if busy >= 0.6:
                break
        assert busy >= 0.6
        reply = await client.get_shell_msg(timeout=10)
        assert reply["content"]["status"] == "ok"
        for _ in range(30):
            after = json.loads((await jp_fetch("api", "gpuburst", "gpus")).body)
            if utilization(after) == 0.0:
                break
            await asyncio.sleep(0.1)
        assert utilization(after) == 0.0
    finally:
        client.stop_channels()
        await km.shutdown_kernel(kernel_id, now=True)
