"""The lab extension's wire types (labextension/src/types.ts) against the JSON the server sends.

Each reply is written into a TypeScript file as an object literal assigned to its type, and the
TypeScript compiler checks it: a field the server sends that the type lacks, one the type needs
that the server leaves out, or a value of another type fails the test.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from jupyter_client.manager import AsyncKernelManager
from serverext_env import DONOR_ENV as SERVER_ON_DONOR

from jupyter_gpuburst.server.kernels.handlers import fetch_profiles_now
from jupyter_gpuburst.server.kernels.provisioner import remote_kernels
from jupyter_gpuburst.server.kernels.usage import KernelUsageCache

REPO = Path(__file__).resolve().parents[2]
TYPES = REPO / "labextension" / "src" / "types"
TSC = REPO / "node_modules" / ".bin" / "tsc"
DONOR_ENV = {
    **SERVER_ON_DONOR,
    "JUPYTER_GPUBURST_STORAGE": "scratch",
    "JUPYTER_GPUBURST_STORAGE_MESSAGE": "Files saved here are lost when the server stops.",
}
KERNEL_CONFIG = {"backend": "simulated", "sim_gpus": 2, "sampling_period_s": 0.1, "process_sampling_period_s": 0.2}

pytestmark = pytest.mark.skipif(not TSC.exists(), reason="the TypeScript compiler is not installed (make setup installs it)")


def type_errors(tmp_path: Path, replies: dict[str, tuple[str, object]]) -> str:
    """What tsc says of ``const name: Type = <json>`` for each reply; empty when they all fit."""
    names = sorted({type_name for type_name, _ in replies.values()})
    lines = [f"import type {{ {', '.join(names)} }} from {json.dumps(str(TYPES))};", ""]
    for name, (type_name, value) in replies.items():
        lines.append(f"export const {name}: {type_name} = {json.dumps(value, indent=2)};")
    source = tmp_path / "replies.ts"
    source.write_text("\n".join(lines) + "\n")
    # the extension's own lib and types (labextension/tsconfig.json): without "types": [], tsc
    # also reads every @types package in node_modules, 150 files and twice the CPU
    options = {"noEmit": True, "strict": True, "skipLibCheck": True, "target": "ES2019", "moduleResolution": "node"}
    options |= {"lib": ["DOM", "DOM.Iterable", "ES2019"], "types": []}
    project = tmp_path / "tsconfig.json"
    project.write_text(json.dumps({"compilerOptions": options, "files": [str(source)]}))
    done = subprocess.run([str(TSC), "--project", str(project)], capture_output=True, text=True, timeout=120)
    return done.stdout + done.stderr


def test_a_reply_the_types_do_not_describe_fails(tmp_path):
    placement = {
        "managed": False,
        "site": "standalone",
        "site_kind": "standalone",
        "cluster": None,
        "node": "n",
        "reason": None,
        "gpu_resource": None,
        "gpu_count": None,
        "gpu_label": None,
        "storage": None,
    }
    assert type_errors(tmp_path, {"placement": ("IPlacement", placement)}) == ""
    assert "surprise" in type_errors(tmp_path, {"placement": ("IPlacement", {**placement, "surprise": 1})})
    assert '"moon"' in type_errors(tmp_path, {"placement": ("IPlacement", {**placement, "site_kind": "moon"})})


@pytest.mark.parametrize("gpuburst_env", [DONOR_ENV])
@pytest.mark.parametrize("gpuburst_config", [KERNEL_CONFIG])
async def test_the_server_extension_replies_fit_their_types(jp_fetch, tmp_path):
    async def get(*path: str) -> object:
        return json.loads((await jp_fetch("api", "gpuburst", *path)).body)

    # a running kernel on the simulated GPUs, so the sample attributes GPU memory to it
    created = await get_session(jp_fetch)
    try:
        for _ in range(200):
            sample = await get("gpus")
            if any(k["gpus"] for k in sample["kernels"]):
                break
            await asyncio.sleep(0.1)
        assert any(k["gpus"] for k in sample["kernels"]), sample
        replies = {
            "placement": ("IPlacement", await get("placement")),
            "sample": ("ISample", sample),
            "history": ("IHistory", await get("history")),
            "kernels": ("IGpuKernelsReply", await get("kernels")),
            "profiles": ("IProfilesReply", await get("kernel-profiles")),
        }
    finally:
        await jp_fetch("api", "kernels", created, method="DELETE")
    assert replies["placement"][1]["storage"]["kind"] == "scratch"
    assert type_errors(tmp_path, replies) == ""


async def get_session(jp_fetch) -> str:
    body = json.dumps({"path": "work/train.ipynb", "type": "notebook", "kernel": {"name": "python3"}})
    response = await jp_fetch("api", "sessions", method="POST", body=body)
    return json.loads(response.body)["kernel"]["id"]


async def test_gpu_kernel_records_and_profiles_fit_their_types(hub, specs, tmp_path):
    """A GPU kernel placed through the (stand-in) hub, as ``GET /api/gpuburst/kernels`` reports it."""
    km = AsyncKernelManager(kernel_name="gpuburst-gpu-1", kernel_spec_manager=specs)
    await km.start_kernel()
    try:
        client = km.client()
        client.start_channels()
        await client.wait_for_ready(timeout=60)
        manager = SimpleNamespace(list_kernel_ids=lambda: ["k-1"], get_kernel=lambda kernel_id: km)
        (kernel,) = remote_kernels(manager)
        kernel["gpu"] = (await KernelUsageCache().figures(manager, ["k-1"]))["k-1"]
        assert kernel["gpu"] is not None and kernel["site"] == "origin"
        profiles = await fetch_profiles_now()
        assert profiles["profiles"] and profiles["error"] is None
        client.stop_channels()
    finally:
        await km.shutdown_kernel(now=True)
    assert type_errors(tmp_path, {"kernels": ("IGpuKernelsReply", {"kernels": [kernel]}), "profiles": ("IProfilesReply", profiles)}) == ""


def test_a_kernels_place_in_the_hubs_queue_fits_its_type(tmp_path):
    from jupyter_gpuburst.hub.kernels.queued import Line
    from jupyter_gpuburst.hub.queue.estimate import Estimate

    replies = {
        "known": ("IGpuKernelQueue", Line(2, Estimate(180.0, "sessions")).as_dict()),
        "unknown": ("IGpuKernelQueue", Line(1, Estimate(None, "unknown")).as_dict()),
    }
    assert replies["known"][1]["text"] == "a GPU: 2nd in line, about 3 min"
    assert type_errors(tmp_path, replies) == ""
