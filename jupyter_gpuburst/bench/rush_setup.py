"""What `gpuburst bench rush` runs against: the federation, the hub's config and the warm pools.

The federation is ``sim/rush.yaml``'s: its images, their sizes, each site's pull bandwidth and
shape of node, with cold nodes (``preloaded_images: []``). Only the number of nodes is scaled to
the class: a quarter of the GPUs on the origin, the rest granted by ``donor-1``, a tenth more
GPUs than students in all, and CPU nodes enough for every student's CPU server in kernel mode.

Every arm's hub is the product as an admin sets it up for the rush: GPUBurstSpawner, a 1-GPU
server profile running the CUDA image, a CPU server profile for kernel mode, one GPU kernel
profile on the same image, the queue on. :class:`ArmSetup` is the one place an arm's extra hub
settings are made, and :func:`arm_setup` what an admin preparing the lab turns on in each mode:

- server mode: placeholder pools (``WarmPools.pools``) of the GPU server profile on every GPU;
- kernel mode: pre-started GPU kernels (``WarmPools.kernels``) on every GPU, each site's own
  (they pull the CUDA image onto their nodes as placeholders would, and a request adopts one
  in about a round trip to the hub; a placeholder beside them would find no GPU left to hold),
  and the CPU server image on the origin's nodes as z2jh's continuous image puller keeps it
  there (``prePuller.continuous``, on by default): a warm pool holds GPUs, and pulling a CPU
  image onto every node is that DaemonSet's job, which the emulator does not run, so the arm's
  federation starts with that one image on the origin's nodes instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from jupyter_gpuburst.bench.kernel_client import KERNEL_SCOPES, STANDIN_KERNEL
from jupyter_gpuburst.bench.spawn import NAMESPACE, STANDIN, api_timeout_lines
from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.sim.config import FederationConfig, parse_config

RUSH_YAML = Path(__file__).resolve().parent.parent / "sim" / "rush.yaml"
GPU = "nvidia.com/gpu"
DONOR = "donor-1"
GPU_PROFILE = "gpu1"  # a whole GPU server (server mode), and the pools' profile
CPU_PROFILE = "cpu"  # the CPU server that stays home in kernel mode
KERNEL_PROFILE = "gpu-1"
GROUP = "rush-students"
GPUS_PER_NODE = 8  # rush.yaml's GPU nodes, origin and donor
CPU_SERVERS_PER_NODE = 120  # 0.5 CPU each on rush.yaml's 64-CPU nodes, room left for the system


def rush_yaml() -> dict[str, Any]:
    return yaml.safe_load(RUSH_YAML.read_text())


def cuda_image(data: dict[str, Any] | None = None) -> str:
    """The largest image rush.yaml sizes: the GPU notebook image."""
    sizes = (data or rush_yaml())["images"]["sizes"]
    return max(sizes, key=lambda image: _bytes(sizes[image]))


def cpu_image(data: dict[str, Any] | None = None) -> str:
    sizes = (data or rush_yaml())["images"]["sizes"]
    return min(sizes, key=lambda image: _bytes(sizes[image]))


def _bytes(quantity: str) -> float:
    from jupyter_gpuburst.core.quantities import parse_quantity

    return float(parse_quantity(str(quantity)))


@dataclass(frozen=True)
class Shape:
    """How many nodes of rush.yaml's kinds the run gets for ``students``."""

    origin_gpu_nodes: int
    donor_gpu_nodes: int
    cpu_nodes: int

    @classmethod
    def for_students(cls, students: int) -> Shape:
        gpus = math.ceil(students * 1.1)
        origin = max(1, math.ceil(gpus / 4 / GPUS_PER_NODE))
        donor = max(1, math.ceil((gpus - origin * GPUS_PER_NODE) / GPUS_PER_NODE))
        return cls(origin, donor, max(1, math.ceil(students / CPU_SERVERS_PER_NODE)))

    @property
    def gpus(self) -> dict[str, int]:
        return {"origin": self.origin_gpu_nodes * GPUS_PER_NODE, DONOR: self.donor_gpu_nodes * GPUS_PER_NODE}


def federation(shape: Shape, pull_speedup: float = 1.0, origin_images: tuple[str, ...] = ()) -> FederationConfig:
    """rush.yaml with its node counts set to ``shape`` (``federation_data``), checked."""
    return parse_config(federation_data(shape, pull_speedup, origin_images), f"{RUSH_YAML.name}, scaled")


def federation_data(shape: Shape, pull_speedup: float = 1.0, origin_images: tuple[str, ...] = ()) -> dict[str, Any]:
    """rush.yaml with its node counts set to ``shape``: same images, sizes, bandwidths, cold nodes
    (but for ``origin_images``, on every origin node from the start: an image puller's work).

    ``pull_speedup`` multiplies every site's pull bandwidth: only for the test suite's short runs
    (the JSON reports it); a rush's figures come from 1, rush.yaml's own values.
    """
    data = rush_yaml()
    data["origin"]["preloaded_images"] = list(origin_images)
    for site in (data["origin"], *data["donors"]):
        site["image_pull_bandwidth"] = str(int(_bytes(site["image_pull_bandwidth"]) * pull_speedup))
    for group in data["origin"]["nodes"]:
        group["count"] = shape.origin_gpu_nodes if GPU in (group.get("resources") or {}) else shape.cpu_nodes
        group.setdefault("pods", max(110, CPU_SERVERS_PER_NODE + 10))
    (donor,) = data["donors"]
    for group in donor["nodes"]:
        group["count"] = shape.donor_gpu_nodes
    n = shape.donor_gpu_nodes
    donor["grant"] = {"cpu": str(64 * n), "memory": f"{512 * n}Gi", "pods": str(110 * n), GPU: n * GPUS_PER_NODE}
    return data


@dataclass(frozen=True)
class ArmSetup:
    """One arm's switches on top of the product's rush setup (see the module docstring)."""

    mode: str  # "kernel" | "server"
    pools: tuple[dict[str, Any], ...] = ()  # WarmPools.pools (placeholders); () is none
    kernels: tuple[dict[str, Any], ...] = ()  # WarmPools.kernels (pre-started GPU kernels); () is none
    pulled: tuple[str, ...] = ()  # images an image puller keeps on the origin's nodes
    extra: tuple[str, ...] = field(default=())  # further hub config lines

    @property
    def name(self) -> str:
        return f"{self.mode}_{'pools' if self.pools or self.kernels else 'no_pools'}"

    @property
    def warm(self) -> int:
        """Pods the pools keep waiting: the rush starts once every one is ready."""
        return sum(p["count"] for p in (*self.pools, *self.kernels))

    def describe(self) -> dict[str, Any]:
        """What the JSON says this arm had."""
        return {"placeholders": list(self.pools), "prestarted_kernels": list(self.kernels), "image_puller_on_origin": list(self.pulled)}

    def config_lines(self) -> str:
        lines = list(self.extra)
        if self.pools:
            lines.append(f"c.WarmPools.pools = {list(self.pools)!r}")
        if self.kernels:
            lines.append(f"c.WarmPools.kernels = {list(self.kernels)!r}")
        if self.pools or self.kernels:
            # checked often, so that a taken placeholder's room is refilled during the rush
            lines.append("c.WarmPools.interval_seconds = 1.0")
        return "\n".join(lines)


def sized_pools(shape: Shape, fraction: float) -> tuple[dict[str, Any], ...]:
    """Pools sized for the rush: ``fraction`` of each site's GPUs held warm (1.0: every GPU, so
    every GPU node has the image and every student's GPU is ready)."""
    return tuple(
        {"site": site, "profile": GPU_PROFILE, "count": math.ceil(gpus * fraction)} for site, gpus in shape.gpus.items() if fraction > 0
    )


def sized_kernels(shape: Shape, fraction: float) -> tuple[dict[str, Any], ...]:
    """Pre-started GPU kernels sized for the rush: ``fraction`` of each site's GPUs (1.0: a kernel
    waits on every GPU, so every student placed on a site adopts one)."""
    return tuple(
        {"site": site, "profile": KERNEL_PROFILE, "count": math.ceil(gpus * fraction)} for site, gpus in shape.gpus.items() if fraction > 0
    )


def arm_setup(mode: str, with_pools: bool, shape: Shape, fraction: float) -> ArmSetup:
    """What an admin preparing the lab turns on for ``mode`` (the module docstring says why);
    without pools, nothing: cold nodes and no pool."""
    if not with_pools:
        return ArmSetup(mode)
    if mode == "kernel":
        return ArmSetup(mode, kernels=sized_kernels(shape, fraction), pulled=(cpu_image(),))
    return ArmSetup(mode, pools=sized_pools(shape, fraction))


WAL_LINES = """
from jupyter_gpuburst.hub.database import sqlite_wal
sqlite_wal()
"""


def hub_config(arm: ArmSetup, users: list[str], start_timeout: int, api_timeout: int | None = None, sqlite_wal: bool = True) -> str:
    """The hub's config for one arm (on top of ``HubProcess``'s base); ``api_timeout`` as in
    :func:`~jupyter_gpuburst.bench.spawn.api_timeout_lines`; ``sqlite_wal``: the hub's SQLite
    database in WAL mode, as docs/warm-pools.md has an admin prepare a hub for a lab
    (``hub.database``), else in SQLite's default rollback-journal mode."""
    data = rush_yaml()
    gpu_image, server_image = cuda_image(data), cpu_image(data)
    profiles = [
        {
            "display_name": "One GPU",
            "slug": GPU_PROFILE,
            "default": True,
            "kubespawner_override": {
                "image": gpu_image,
                "cpu_guarantee": 2,
                "mem_guarantee": "8G",
                "extra_resource_limits": {GPU: "1"},
                "tolerations": [liqo.virtual_node_toleration()],
            },
        },
        {
            "display_name": "CPU server with GPU kernels",
            "slug": CPU_PROFILE,
            "kubespawner_override": {"image": server_image, "cpu_guarantee": 0.5, "mem_guarantee": "1G"},
        },
    ]
    kernels = [{"slug": KERNEL_PROFILE, "resource": GPU, "count": 1, "image": gpu_image, "cpu": "2", "memory": "8G"}]
    return f"""
import sys
c.JupyterHub.spawner_class = "gpuburst"
c.JupyterHub.concurrent_spawn_limit = 0
c.JupyterHub.active_server_limit = 0
c.JupyterHub.last_activity_interval = 3600
# the spawn request itself waits for the server
c.JupyterHub.tornado_settings = {{"slow_spawn_timeout": {start_timeout}}}
c.JupyterHub.load_groups = {{{GROUP!r}: {{"users": {users!r}}}}}
c.JupyterHub.load_roles.append({{"name": "rush-gpu-kernels", "scopes": {KERNEL_SCOPES!r}, "groups": [{GROUP!r}]}})
c.KubeSpawner.namespace = {NAMESPACE!r}
c.KubeSpawner.cmd = [sys.executable, "-I", "-S", {str(STANDIN)!r}]
c.KubeSpawner.start_timeout = {start_timeout}
c.KubeSpawner.http_timeout = {start_timeout}
c.KubeSpawner.profile_list = {profiles!r}
c.KubeSpawner.environment = {{"JUPYTERHUB_VERSION": __import__("jupyterhub").__version__}}
c.Spawner.poll_interval = 300
c.GPUKernelSettings.profiles = {kernels!r}
c.GPUKernelSettings.command = {STANDIN_KERNEL!r}
c.GPUKernelSettings.start_timeout = {float(start_timeout)!r}
c.GPUKernelSettings.queue_when_full = True
{api_timeout_lines(api_timeout)}{arm.config_lines()}{WAL_LINES if sqlite_wal else ""}
from jupyter_gpuburst.hub import install
install(c)
"""
