"""Attribution of a real running kernel with the simulated backend."""

from __future__ import annotations

import json

import pytest

from jupyter_gpuburst.sim.testing import wait_until

KERNEL_CONFIG = {"backend": "simulated", "sim_gpus": 2, "sampling_period_s": 0.1, "process_sampling_period_s": 0.5}


async def sample_of(jp_fetch) -> dict:
    return json.loads((await jp_fetch("api", "gpuburst", "gpus")).body)


async def wait_for_kernel(jp_fetch, kernel_id: str, timeout: float = 20.0) -> dict:
    async def using_a_gpu() -> dict | None:
        sample = await sample_of(jp_fetch)
        mine = [k for k in sample["kernels"] if k["kernel_id"] == kernel_id]
        return sample if mine and mine[0]["gpus"] else None

    return await wait_until(using_a_gpu, timeout, f"kernel {kernel_id} to show GPU use", interval=0.1)


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

    async def kernel_gone() -> dict | None:
        sample = await sample_of(jp_fetch)
        return None if any(k["kernel_id"] == kernel_id for k in sample["kernels"]) else sample

    sample = await wait_until(kernel_gone, 5, "the kernel to leave the sample", interval=0.1)
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

        async def busy() -> bool:
            return utilization(await sample_of(jp_fetch)) >= 0.6

        # the cell keeps the kernel busy for 2.5 s from whenever it starts running, which a loaded
        # machine may delay: a GPU that never goes busy still fails here
        await wait_until(busy, 15, "the busy kernel to drive its GPU", interval=0.1)
        reply = await client.get_shell_msg(timeout=10)
        assert reply["content"]["status"] == "ok"

        async def idle() -> bool:
            return utilization(await sample_of(jp_fetch)) == 0.0

        await wait_until(idle, 10, "the GPU to go idle with its kernel", interval=0.1)
    finally:
        client.stop_channels()
        await km.shutdown_kernel(kernel_id, now=True)
