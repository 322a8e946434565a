"""`gpuburst bench spawn`: many users start a 1-GPU server at once through a real JupyterHub.

One local federation (default 40 local + 160 donor GPUs) serves two hubs in turn:
1. baseline: plain KubeSpawner, a CPU-only profile, ``--concurrent`` users;
2. GPUBurstSpawner, a 1-GPU profile, the same number of users.

Each user's spawn is one ``POST /hub/api/users/{name}/server`` that returns when the server
answers (the hub's slow-spawn timeout is raised so the request waits), so its duration is the
spawn time the user sees. The single-user command is ``bench/standin.py``, a few-MB HTTP
answerer: a real Jupyter server per user does not fit a 2-core machine at 200 users, and the
hub's readiness check only needs an HTTP answer.

Reported: ``ready`` servers, ``overcommitted`` pods (bound beyond a node's allocatable GPUs, over
every node of every cluster, read from the emulator's stores), ``redirects`` (from the hub's own
``/hub/metrics``), p50/p95 spawn times for both runs, and the API reads (list + get, counted by
the emulated API server) per spawn that the GPU spawner made beyond the baseline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from jupyter_gpuburst.core.inventory import Inventory
from jupyter_gpuburst.sim.config import FederationConfig, parse_config
from jupyter_gpuburst.sim.federation import Federation
from jupyter_gpuburst.sim.testing import running_federation
from jupyter_gpuburst.bench.hubproc import HubProcess

GPU = "nvidia.com/gpu"
DONOR = "donor-1"
NAMESPACE = "default"
STANDIN = Path(__file__).with_name("standin.py")
GPUS_PER_LOCAL_NODE = 4
GPUS_PER_DONOR_NODE = 8
# hub log level in --state-dir; DEBUG shows every reflector event when a spawn misbehaves
HUB_LOG_LEVEL = os.environ.get("GPUBURST_BENCH_HUB_LOG_LEVEL", "WARN")

PROFILES = [
    {"display_name": "CPU only", "slug": "cpu", "default": True},
    {"display_name": "One GPU", "slug": "gpu1", "kubespawner_override": {"extra_resource_limits": {GPU: "1"}}},
]


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (the value at or below which q% of samples fall)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def _node_groups(prefix: str, gpus: int, per_node: int, pods: int) -> list[dict[str, Any]]:
    groups = []
    full, rest = divmod(gpus, per_node)
    if full:
        groups.append({"name": prefix, "count": full, "cpu": "64", "memory": "512Gi", "pods": pods, "resources": {GPU: per_node}})
    if rest:
        groups.append({"name": f"{prefix}-small", "cpu": "64", "memory": "512Gi", "pods": pods, "resources": {GPU: rest}})
    return groups


def federation_config(local_gpus: int, donor_gpus: int, users: int) -> FederationConfig:
    """Origin with ``local_gpus`` (4 per node) and a donor granting ``donor_gpus`` (8 per node)."""
    origin_nodes = _node_groups("origin-gpu", local_gpus, GPUS_PER_LOCAL_NODE, 110)
    # the baseline's CPU servers need room of their own: pod slots, not GPUs
    origin_nodes.append({"name": "origin-cpu", "count": max(1, math.ceil(users / 100)), "cpu": "64", "memory": "512Gi", "pods": 110})
    data: dict[str, Any] = {"origin": {"name": "origin", "nodes": origin_nodes}, "donors": []}
    if donor_gpus:
        data["donors"].append({
            "name": DONOR,
            "nodes": _node_groups(f"{DONOR}-gpu", donor_gpus, GPUS_PER_DONOR_NODE, 110),
            "grant": {"cpu": "1000", "memory": "8Ti", "pods": str(users + 110), GPU: donor_gpus},
        })
    return parse_config(data, "<bench spawn>")


def hub_config(spawner: str, start_timeout: int = 600, extra: str = "") -> str:
    """Hub config lines on top of ``HubProcess``'s base: the spawner and the stand-in server."""
    return f"""
import sys
from jupyter_gpuburst.hub import install
install(c)
c.JupyterHub.spawner_class = {spawner!r}
c.JupyterHub.concurrent_spawn_limit = 0
c.JupyterHub.active_server_limit = 0
c.JupyterHub.last_activity_interval = 3600
# the spawn request itself waits for the server: its duration is the spawn time
c.JupyterHub.tornado_settings = {{"slow_spawn_timeout": {start_timeout}}}
c.KubeSpawner.namespace = {NAMESPACE!r}
# an image with no emulated entrypoint: the pod runs exactly the command below
c.KubeSpawner.image = "gpuburst/bench-standin:1"
c.KubeSpawner.cmd = [sys.executable, "-I", "-S", {str(STANDIN)!r}]
c.KubeSpawner.start_timeout = {start_timeout}
c.KubeSpawner.http_timeout = {start_timeout}
c.KubeSpawner.profile_list = {PROFILES!r}
c.KubeSpawner.environment = {{"JUPYTERHUB_VERSION": __import__("jupyterhub").__version__}}
c.Spawner.poll_interval = 300
{extra}
"""


def api_reads(fed: Federation) -> int:
    """List and get requests the origin's API server has answered so far."""
    stats = fed.origin.api.stats
    return int(stats.get("list", 0) + stats.get("get", 0))


def overcommitted_pods(fed: Federation) -> int:
    """Pods bound to a node beyond its allocatable GPUs, in creation order, over every cluster."""
    inventory = Inventory()
    over = 0
    for cluster in fed.clusters.values():
        store = cluster.store
        nodes = {n["metadata"]["name"]: n for n in store.list("nodes")[0]}
        pods, _ = store.list("pods")
        pods.sort(key=lambda p: (p["metadata"].get("creationTimestamp", ""), int(p["metadata"].get("resourceVersion", 0))))
        used: dict[tuple[str, str], int] = {}
        for pod in pods:
            node = (pod.get("spec") or {}).get("nodeName")
            if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            allocatable = ((nodes.get(node) or {}).get("status") or {}).get("allocatable") or {}
            beyond = False
            for resource, count in inventory.pod_requests(pod).items():
                used[(node, resource)] = used.get((node, resource), 0) + count
                if used[(node, resource)] > int(allocatable.get(resource, 0)):
                    beyond = True
            over += beyond
    return over


def pod_rss_mib(fed: Federation) -> float:
    """Resident memory of every pod process (the stand-in servers), in MiB."""
    total = 0
    for cluster in fed.clusters.values():
        for pid in cluster.kubelet.processes().values():
            try:
                total += psutil.Process(pid).memory_info().rss
            except psutil.Error:
                continue
    return total / 2**20


async def metric_sum(hub: HubProcess, session: aiohttp.ClientSession, name: str) -> float:
    """Sum of one series over all its labels, from the hub's /hub/metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    async with session.get(f"{hub.url}/hub/metrics", headers=hub.headers()) as resp:
        text = await resp.text()
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                total += sample.value
    return total


async def clear_pods(fed: Federation, timeout: float = 60.0) -> None:
    """Delete every pod left in the user namespace and wait for their processes to end."""
    for cluster in fed.clusters.values():
        for pod in cluster.store.list("pods")[0]:
            try:
                cluster.store.delete("pods", pod["metadata"]["namespace"], pod["metadata"]["name"], grace_period_seconds=0)
            except Exception:  # noqa: BLE001 - already gone
                pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(c.kubelet.processes() for c in fed.clusters.values()) and not any(c.store.list("pods")[0] for c in fed.clusters.values()):
            return
        await asyncio.sleep(0.1)


@dataclass
class PhaseResult:
    requested: int
    ready: int = 0
    failures: list[str] = field(default_factory=list)
    spawn_s: list[float] = field(default_factory=list)
    api_reads: int = 0
    wall_s: float = 0.0
    pod_rss_mib: float = 0.0
    hub_rss_mib: float = 0.0
    redirects: float = 0.0
    sites: dict[str, int] = field(default_factory=dict)
    overcommitted: int = 0


async def spawn_all(hub: HubProcess, session: aiohttp.ClientSession, users: list[str], profile: str) -> tuple[list[float], list[str]]:
    """Every user's spawn at once; returns (seconds of each successful spawn, failure texts)."""

    async def one(name: str) -> tuple[float | None, str | None]:
        started = time.monotonic()
        status, body = await hub.request(session, "POST", f"/users/{name}/server", json={"profile": profile})
        elapsed = time.monotonic() - started
        if status == 201:
            return elapsed, None
        return None, f"{name}: HTTP {status}: {str(body)[:300]}"

    outcomes = await asyncio.gather(*(one(u) for u in users))
    return [s for s, _ in outcomes if s is not None], [f for _, f in outcomes if f is not None]


def pod_states(fed: Federation) -> dict[str, int]:
    """How many pods are in each (cluster, phase, ready) state: what a failed run leaves behind."""
    states: dict[str, int] = {}
    for name, cluster in fed.clusters.items():
        for pod in cluster.store.list("pods")[0]:
            status = pod.get("status") or {}
            ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
            key = f"{name}:{status.get('phase')}:{'ready' if ready else 'not-ready'}"
            states[key] = states.get(key, 0) + 1
    return states


async def run_phase(fed: Federation, workdir: Path, kubeconfig: Path, spawner: str, profile: str, users: int, prefix: str, start_timeout: int) -> PhaseResult:
    result = PhaseResult(requested=users)
    hub = HubProcess(workdir, hub_config(spawner, start_timeout), env={"KUBECONFIG": str(kubeconfig)}, log_level=HUB_LOG_LEVEL)
    await hub.start()
    names = [f"{prefix}{i:03d}" for i in range(users)]
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=900)
    try:
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            status, body = await hub.request(session, "POST", "/users", json={"usernames": names})
            if status != 201:
                raise RuntimeError(f"could not create users: HTTP {status}: {body}")
            # the capacity tracker is one per hub process, started once: not a per-spawn cost
            status, body = await hub.capacity(session)
            if spawner == "gpuburst" and status != 200:
                raise RuntimeError(f"capacity API: HTTP {status}: {body}")
            reads_before = api_reads(fed)
            started = time.monotonic()
            result.spawn_s, result.failures = await spawn_all(hub, session, names, profile)
            result.wall_s = time.monotonic() - started
            result.api_reads = api_reads(fed) - reads_before
            result.ready = len(result.spawn_s)
            result.pod_rss_mib = pod_rss_mib(fed)
            if hub.proc is not None:
                result.hub_rss_mib = psutil.Process(hub.proc.pid).memory_info().rss / 2**20
            result.overcommitted = overcommitted_pods(fed)
            if result.failures:
                result.failures.append(f"pods: {pod_states(fed)}")
            if spawner == "gpuburst":
                result.redirects = await metric_sum(hub, session, "jupyterhub_gpuburst_redirects_total")
                status, report = await hub.capacity(session)
                for placement in (report or {}).get("placements", []):
                    result.sites[placement["site"]] = result.sites.get(placement["site"], 0) + 1
    finally:
        await hub.stop(timeout=30)
        await clear_pods(fed)
    return result


async def run(users: int, local_gpus: int, donor_gpus: int, state_dir: Path, start_timeout: int = 600) -> dict[str, Any]:
    kubeconfig = state_dir / "kubeconfig"
    config = federation_config(local_gpus, donor_gpus, users)
    async with running_federation(config, state_dir=state_dir / "sim", kubeconfig=kubeconfig) as fed:
        baseline = await run_phase(fed, state_dir / "hub-baseline", kubeconfig, "kubespawner.KubeSpawner", "cpu", users, "base", start_timeout)
        gpu = await run_phase(fed, state_dir / "hub-gpu", kubeconfig, "gpuburst", "gpu1", users, "gpu", start_timeout)
    extra_reads = gpu.api_reads - baseline.api_reads
    return {
        "benchmark": "spawn",
        "requested": users,
        "local_gpus": local_gpus,
        "donor_gpus": donor_gpus,
        "ready": gpu.ready,
        "overcommitted": gpu.overcommitted,
        "redirects": int(gpu.redirects),
        "sites": gpu.sites,
        "p50_spawn_s": round(percentile(gpu.spawn_s, 50), 3),
        "p95_spawn_s": round(percentile(gpu.spawn_s, 95), 3),
        "max_spawn_s": round(max(gpu.spawn_s, default=0.0), 3),
        "baseline_ready": baseline.ready,
        "baseline_p50_spawn_s": round(percentile(baseline.spawn_s, 50), 3),
        "baseline_p95_spawn_s": round(percentile(baseline.spawn_s, 95), 3),
        "api_reads": gpu.api_reads,
        "baseline_api_reads": baseline.api_reads,
        "extra_api_reads_per_spawn": round(extra_reads / users, 3),
        "wall_s": round(gpu.wall_s, 2),
        "baseline_wall_s": round(baseline.wall_s, 2),
        "standin_rss_mib_total": round(gpu.pod_rss_mib, 1),
        "hub_rss_mib": round(gpu.hub_rss_mib, 1),
        "failures": (baseline.failures + gpu.failures)[-6:],
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuburst bench spawn", description=__doc__.splitlines()[0])
    parser.add_argument("--concurrent", type=int, default=200, help="users spawning at once (default 200)")
    parser.add_argument("--local-gpus", type=int, default=None, help="GPUs on the origin (default: a fifth of --concurrent, 40 for 200)")
    parser.add_argument("--donor-gpus", type=int, default=None, help="GPUs the donor grants (default: the rest, 160 for 200)")
    parser.add_argument("--start-timeout", type=int, default=600, help="seconds one spawn may take before the hub gives up")
    parser.add_argument("--state-dir", type=Path, default=None, help="keep hub logs and pod logs here (default: a temp dir, removed)")
    parser.add_argument("--json", action="store_true", help="print one JSON object on one line")
    args = parser.parse_args(argv)
    if args.concurrent < 1:
        parser.error("--concurrent must be at least 1")
    local = args.local_gpus if args.local_gpus is not None else args.concurrent // 5
    donor = args.donor_gpus if args.donor_gpus is not None else args.concurrent - local
    if local < 0 or donor < 0:
        parser.error("--local-gpus and --donor-gpus must not be negative")
    if args.state_dir is not None:
        args.state_dir.mkdir(parents=True, exist_ok=True)
        result = asyncio.run(run(args.concurrent, local, donor, args.state_dir, args.start_timeout))
    else:
        with tempfile.TemporaryDirectory(prefix="gpuburst-bench-spawn-") as tmp:
            result = asyncio.run(run(args.concurrent, local, donor, Path(tmp), args.start_timeout))
    json.dump(result, sys.stdout, indent=None if args.json else 2)
    sys.stdout.write("\n")
    ok = result["ready"] == args.concurrent and result["overcommitted"] == 0
    return 0 if ok else 1
