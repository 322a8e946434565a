"""`gpuburst bench kernels`: GPU kernel start latency, and concurrent kernel starts without double booking.

Runs the hub's kernel registry (the code behind ``/services/gpuburst/api/kernels``) in this process
against the local federation; the HTTP hop from the server to the hub is left out, it is the
same for every site.

1. **latency**: ``--rounds`` rounds, each starting (interleaved, same run) one GPU kernel pinned
   to the origin (a cold start: a pod of its own), one that adopts a pre-started kernel of a
   warm pool on the origin (``c.WarmPools.kernels``; each round waits for the pool to have
   refilled, as a lab's first students find it), one pinned to the donor, and one plain local
   ipykernel (jupyter_client's LocalProvisioner); each is timed from the start request to the
   reply to its first cell (``execute_reply``) over ZMQ, then stopped. Reported per arm:
   median, p50, p99 and max; origin and donor over local as ratios.
2. **concurrency**: a federation with ``--gpus`` GPUs (40% origin, 60% donor); ``--concurrent``
   kernels requested at once. Each kernel pod runs a stand-in that only binds the five ports (a
   real ipykernel per kernel does not fit a 2-core machine). Reported: kernels started and
   refused, double bookings read from every cluster's API server (pods bound beyond a node's
   allocatable GPUs) and from the ledger (reservations beyond a site's free GPUs), p50/p95.

Checks (``checks``, ``ok``; exit status 1 when one fails): no double booking either way; no
start failed; every GPU got a kernel and only the requests beyond them were refused; every
pre-started round took the fast path (adopted a waiting kernel), and its median is below the
cold origin start's. The ratios to a local kernel are reported, not checked.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from jupyter_gpuburst.bench import stopping
from jupyter_gpuburst.bench.spawn import GPU, percentile
from jupyter_gpuburst.core.inventory import Inventory
from jupyter_gpuburst.hub.capacity.tracker import CapacityTracker
from jupyter_gpuburst.hub.kernels.prestarted import pool_name
from jupyter_gpuburst.hub.kernels.registry import KernelError, KernelRegistry
from jupyter_gpuburst.hub.kernels.settings import GPUKernelSettings
from jupyter_gpuburst.hub.settings import GPUBurstSettings
from jupyter_gpuburst.sim.config import parse_config
from jupyter_gpuburst.sim.federation import Federation
from jupyter_gpuburst.sim.testing import running_federation

log = logging.getLogger("gpuburst.bench.kernels")
DONOR = "donor-1"
PRESTARTED = "origin-prestarted"  # the kernel profile the warm pool pre-starts
POOL = pool_name("origin", PRESTARTED)
# binds the five ports of the connection and waits: what kubelet readiness and the ledger see
STANDIN = (
    "import json,os,socket,time;c=json.loads(os.environ['JUPYTER_GPUBURST_KERNEL_CONNECTION']);"
    "s=[socket.create_server((c['ip'],c[k])) for k in ('shell_port','iopub_port','stdin_port','control_port','hb_port')];"
    "time.sleep(3600)"
)


def overcommitted_pods(fed: Federation) -> int:
    """Pods bound to a node beyond its allocatable GPUs, in creation order, over every cluster.

    Read from the API servers' own objects, whoever bound the pods, so a kernel and a server
    promised the same GPU show up here even if the ledger disagrees.
    """
    return sum(overcommitted(cluster.store.list("nodes")[0], cluster.store.list("pods")[0]) for cluster in fed.clusters.values())


def overcommitted(nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> int:
    """Of one cluster's ``pods``, those bound beyond their node's allocatable GPUs (in creation order)."""
    inventory = Inventory()
    allocatable_of = {n["metadata"]["name"]: (n.get("status") or {}).get("allocatable") or {} for n in nodes}
    pods = sorted(pods, key=lambda p: (p["metadata"].get("creationTimestamp", ""), int(p["metadata"].get("resourceVersion", 0))))
    used: dict[tuple[str, str], int] = {}
    over = 0
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        allocatable = allocatable_of.get(node) or {}
        beyond = False
        for resource, count in inventory.pod_requests(pod).items():
            used[(node, resource)] = used.get((node, resource), 0) + count
            if used[(node, resource)] > int(allocatable.get(resource, 0)):
                beyond = True
        over += beyond
    return over


def gpu_nodes(prefix: str, gpus: int, per_node: int, **shape: Any) -> list[dict[str, Any]]:
    """Nodes holding exactly ``gpus`` GPUs: full nodes of ``per_node``, and one with the rest."""
    full, rest = divmod(gpus, per_node)
    nodes = [{"name": f"{prefix}-gpu", "count": full, **shape, "resources": {GPU: per_node}}] if full else []
    if rest:
        nodes.append({"name": f"{prefix}-gpu-rest", **shape, "resources": {GPU: rest}})
    return nodes


def federation(gpus: int, concurrent: int) -> Any:
    """``gpus`` GPUs in all, 40 % on the origin and the rest granted by one donor."""
    origin = max(1, round(gpus * 0.4))
    donor = gpus - origin
    origin_nodes = gpu_nodes("origin", origin, 4, cpu="64", memory="512Gi", pods=110)
    origin_nodes.append({"name": "origin-cpu", "cpu": "64", "memory": "512Gi", "pods": 110})
    data = {
        "origin": {"name": "origin", "nodes": origin_nodes},
        "donors": [
            {
                "name": DONOR,
                "nodes": gpu_nodes(DONOR, donor, 8, cpu="256", memory="2Ti", pods=110),
                "grant": {"cpu": "1000", "memory": "8Ti", "pods": str(concurrent + 110), GPU: donor},
            }
        ],
    }
    return parse_config(data, "<bench kernels>")


async def registry_on(kubeconfig: Path, settings: GPUKernelSettings) -> tuple[KernelRegistry, Any]:
    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), context="origin", client_configuration=configuration)
    api_client = client.ApiClient(configuration)
    tracker = CapacityTracker(client.CoreV1Api(api_client), GPUBurstSettings(), log)
    await tracker.start()
    registry = KernelRegistry(tracker, settings, client.CoreV1Api(api_client), client.CustomObjectsApi(api_client), "bench", "default", log)
    return registry, api_client


FIRST_CELL = "x = 1 + 1"


async def first_cell(kc: Any, timeout: float = 120) -> None:
    """Run a first cell and return at its ``execute_reply`` (the student sees ``[1]``)."""
    msg_id = kc.execute(FIRST_CELL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reply = await kc.get_shell_msg(timeout=deadline - time.monotonic())
        if reply["parent_header"].get("msg_id") == msg_id:
            if reply["content"].get("status") != "ok":
                raise RuntimeError(f"the first cell failed: {reply['content']}")
            return
    raise TimeoutError("no reply to the first cell")


async def first_reply(connection: dict[str, Any], key: bytes, timeout: float = 120) -> None:
    from jupyter_client.asynchronous.client import AsyncKernelClient

    kc = AsyncKernelClient()
    kc.load_connection_info({**connection, "key": key, "signature_scheme": "hmac-sha256"})
    kc.start_channels()
    try:
        await first_cell(kc, timeout)
    finally:
        kc.stop_channels()


async def remote_start(registry: KernelRegistry, profile: str, user: str) -> tuple[float, bool]:
    """(seconds from the request to the first cell's reply, whether a pre-started kernel was adopted)"""
    import secrets

    key = secrets.token_hex(16)
    t0 = time.perf_counter()
    record = await registry.start(
        user=user,
        groups=frozenset(),
        server_name="",
        server_pod=None,
        profile_slug=profile,
        key=key,
        signature_scheme="hmac-sha256",
        kernel_id="",
        notebook_dir="",
    )
    while record.state == "pending":
        await registry.wait(record, 5)
    if record.state != "running":
        raise RuntimeError(f"{profile} kernel did not start: {record.error}")
    connection = {"transport": "tcp", "ip": registry.pod_ip(record), **record.ports}
    await first_reply(connection, key.encode())
    elapsed = time.perf_counter() - t0
    await registry.stop(record)
    return elapsed, record.prestarted


async def local_start() -> float:
    from jupyter_client.manager import AsyncKernelManager

    t0 = time.perf_counter()
    km = AsyncKernelManager(kernel_name="python3")
    await km.start_kernel()
    kc = km.client()
    kc.start_channels()
    try:
        await first_cell(kc)
        elapsed = time.perf_counter() - t0
    finally:
        kc.stop_channels()
        await km.shutdown_kernel(now=True)
    return elapsed


def start_pool(registry: KernelRegistry, api_client: Any, settings: GPUKernelSettings) -> Any:
    """A warm pool of one pre-started kernel of ``PRESTARTED`` on the origin, as the hub keeps it."""
    from functools import partial

    from kubernetes_asyncio.client import SchedulingV1Api

    from jupyter_gpuburst.hub.kernels import prestarted
    from jupyter_gpuburst.hub.pools.controller import PoolController
    from jupyter_gpuburst.hub.pools.settings import WarmPools

    pools = WarmPools(kernels=[{"site": "origin", "profile": PRESTARTED, "count": 1}], interval_seconds=0.5)
    build = partial(
        prestarted.pooled_pod, "origin", registry.profiles[PRESTARTED], settings, registry.image, "default", pools.priority_class, []
    )
    controller = PoolController(
        pools, {}, "default", registry.api, SchedulingV1Api(api_client), registry.tracker, log, kernel_pods={POOL: build}
    )
    registry.prestarted = {("origin", PRESTARTED)}
    controller.start()
    return controller


async def pool_ready(fed: Federation, timeout: float = 120) -> None:
    """Until the pool's kernel waits with its imports done (its pod is Ready)."""
    from jupyter_gpuburst.core import keys
    from jupyter_gpuburst.hub.kernels.podstate import ready

    store = fed.origin.store
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(ready(p) for p in store.list("pods", "default", label_selector=f"{keys.POOL_LABEL}={POOL}")[0]):
            return
        await asyncio.sleep(0.1)
    raise TimeoutError("the pre-started kernel pool did not refill")


def arm_summary(samples: list[float]) -> dict[str, float]:
    return {
        "median_s": round(statistics.median(samples), 3),
        "p50_s": round(percentile(samples, 50), 3),
        "p99_s": round(percentile(samples, 99), 3),
        "max_s": round(max(samples), 3),
    }


async def latency(rounds: int, state_dir: Path) -> dict[str, Any]:
    kubeconfig = state_dir / "kubeconfig-latency"
    async with running_federation(state_dir=state_dir / "sim-latency", kubeconfig=kubeconfig) as fed:
        settings = GPUKernelSettings(
            profiles=[
                {"slug": "origin", "resource": GPU, "count": 1, "allowed_sites": ["origin"]},
                {"slug": PRESTARTED, "resource": GPU, "count": 1, "allowed_sites": ["origin"]},
                {"slug": "donor", "resource": GPU, "count": 1, "allowed_sites": [DONOR]},
            ]
        )
        registry, api_client = await registry_on(kubeconfig, settings)
        controller = start_pool(registry, api_client, settings)
        times: dict[str, list[float]] = {"origin": [], "origin_prestarted": [], "donor": [], "local": []}
        adopted = cold_adopted = 0
        try:
            for i in range(rounds):
                elapsed, fast = await remote_start(registry, "origin", f"u{i}")
                times["origin"].append(elapsed)
                cold_adopted += fast
                await pool_ready(fed)
                elapsed, fast = await remote_start(registry, PRESTARTED, f"u{i}")
                times["origin_prestarted"].append(elapsed)
                adopted += fast
                times["donor"].append((await remote_start(registry, "donor", f"u{i}"))[0])
                times["local"].append(await local_start())
        finally:
            await controller.stop()
            await registry.tracker.stop()
            await api_client.close()
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "rounds": rounds,
        "first_cell": FIRST_CELL,
        "median_s": {k: round(v, 3) for k, v in med.items()},
        "arms": {k: arm_summary(v) for k, v in times.items()},
        "prestarted_adopted": adopted,
        "cold_adopted": cold_adopted,
        "origin_over_local": round(med["origin"] / med["local"], 2),
        "prestarted_over_local": round(med["origin_prestarted"] / med["local"], 2),
        "donor_over_local": round(med["donor"] / med["local"], 2),
        "samples_s": {k: [round(x, 3) for x in v] for k, v in times.items()},
    }


def ledger_double_bookings(registry: KernelRegistry) -> int:
    """Sites where reservations promise more GPUs than the inventory has free."""
    snapshot = registry.tracker.snapshot()
    over = 0
    for name, site in snapshot.sites.items():
        if registry.tracker.placer.reservations.on_site(name, GPU) > site.free.get(GPU, 0):
            over += 1
        if site.free.get(GPU, 0) < 0:
            over += 1
    return over


async def concurrency(gpus: int, concurrent: int, state_dir: Path) -> dict[str, Any]:
    kubeconfig = state_dir / "kubeconfig-concurrency"
    async with running_federation(federation(gpus, concurrent), state_dir=state_dir / "sim-concurrency", kubeconfig=kubeconfig) as fed:
        settings = GPUKernelSettings(profiles=[{"slug": "gpu-1", "resource": GPU, "count": 1}], start_timeout=600.0)
        settings.command = [sys.executable, "-I", "-S", "-c", STANDIN]
        registry, api_client = await registry_on(kubeconfig, settings)
        try:

            async def one(i: int) -> tuple[str, float]:
                t0 = time.perf_counter()
                try:
                    record = await registry.start(
                        user=f"u{i}",
                        groups=frozenset(),
                        server_name="",
                        server_pod=None,
                        profile_slug="gpu-1",
                        key="k" * 32,
                        signature_scheme="hmac-sha256",
                        kernel_id="",
                        notebook_dir="",
                    )
                except KernelError as exc:
                    return ("refused" if exc.status == 503 else "error", time.perf_counter() - t0)
                while record.state == "pending":
                    await registry.wait(record, 5)
                return (record.state, time.perf_counter() - t0)

            outcomes = await asyncio.gather(*(one(i) for i in range(concurrent)))
            running = [t for state, t in outcomes if state == "running"]
            result = {
                "gpus": gpus,
                "concurrent": concurrent,
                "running": len(running),
                "refused_no_capacity": sum(1 for s, _ in outcomes if s == "refused"),
                "failed": sum(1 for s, _ in outcomes if s not in ("running", "refused")),
                "double_bookings_api_server": overcommitted_pods(fed),
                "double_bookings_ledger": ledger_double_bookings(registry),
                "start_p50_s": round(percentile(running, 50), 3),
                "start_p95_s": round(percentile(running, 95), 3),
            }
            for record in list(registry.records.values()):
                await registry.stop(record, wait=0)
            return result
        finally:
            await registry.tracker.stop()
            await api_client.close()


def checks(concurrency: dict[str, Any], latency: dict[str, Any] | None = None) -> dict[str, bool]:
    """Pass/fail: the GPUs were shared out exactly, and none twice; every pre-started round took
    the fast path, and it is faster than a cold start."""
    fits = min(concurrency["gpus"], concurrency["concurrent"])
    fast: dict[str, bool] = {}
    if latency is not None:
        fast = {
            "prestarted_fast_path_every_round": latency["prestarted_adopted"] == latency["rounds"] and latency["cold_adopted"] == 0,
            "prestarted_faster_than_cold": latency["median_s"]["origin_prestarted"] < latency["median_s"]["origin"],
        }
    return {
        **fast,
        "no_double_booking_api_server": concurrency["double_bookings_api_server"] == 0,
        "no_double_booking_ledger": concurrency["double_bookings_ledger"] == 0,
        "no_failed_start": concurrency["failed"] == 0,
        "every_gpu_used": concurrency["running"] == fits,
        "refused_only_beyond_capacity": concurrency["refused_no_capacity"] == concurrency["concurrent"] - fits,
    }


async def run(rounds: int, gpus: int, concurrent: int, state_dir: Path) -> dict[str, Any]:
    result = {
        "benchmark": "kernels",
        "latency": await latency(rounds, state_dir),
        "concurrency": await concurrency(gpus, concurrent, state_dir),
        "load_average": [round(v, 2) for v in os.getloadavg()],
    }
    result["checks"] = checks(result["concurrency"], result["latency"])
    result["ok"] = all(result["checks"].values())
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuburst bench kernels", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="latency rounds, each arm once per round (default 5)")
    parser.add_argument("--gpus", type=int, default=40, help="GPUs in the concurrency federation (default 40)")
    parser.add_argument("--concurrent", type=int, default=100, help="kernels requested at once (default 100)")
    parser.add_argument("--state-dir", type=Path, help="keep the emulator's files here")
    parser.add_argument("--json", action="store_true", help="print JSON (the only output format)")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.gpus < 2 or args.concurrent < 1:
        parser.error("--rounds and --concurrent must be at least 1, --gpus at least 2")
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="gpuburst-bench-kernels-") as tmp:
        state_dir = args.state_dir or Path(tmp)
        state_dir.mkdir(parents=True, exist_ok=True)
        result = stopping.run(run(args.rounds, args.gpus, args.concurrent, state_dir))
    print(json.dumps(result, indent=1))
    return 0 if result["ok"] else 1
