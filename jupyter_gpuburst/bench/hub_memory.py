"""`gpuburst bench hub-memory`: the hub's resident memory with N pods watched, and the ledger's growth.

The hub watches every node and pod of the cluster (the capacity tracker's two watches,
``hub/capacity/tracker.py``), so its memory grows with the cluster, not only with its own
servers. One emulated federation (origin GPU and CPU nodes sized for the largest ``--pods``, one
donor) serves a real hub process with GPUBurstSpawner's config (``bench/hubproc.py``); the pods
are a busy origin's mix (``bench/hub_memory_pods.py``: a fifth the hub's own GPU servers, the
rest other namespaces' workloads), objects with a running pod's status, run by no process.

For each ``--pods`` count, in alternating order over ``--repeats`` rounds:

1. **watched**: a fresh hub, its tracker started with no pod (``rss_before_mib``); the N pods
   are created and reach it as watch events; once the capacity JSON counts all N bound pods,
   ``rss_watched_mib``.
2. **listed**: that hub is stopped and a fresh one started with the N pods in place, as after a
   restart: its tracker's first list holds them all (``rss_listed_mib``, and ``peak_mib``, the
   process's high-water mark, VmHWM, which the list's decoding sets).

Each phase has a federation of its own. ``per_1000_pods_mib`` is (listed - before) per 1,000 pods,
from the round's two hubs.

**Ledger**: a fresh hub; ``--sessions`` GPU servers' pods are created and deleted (in batches
that fit the origin's GPUs) through the same path as in production: the API server's watch,
the tracker, the GPU-hours ledger's own writes. Once the ledger has ended every session, its
bytes in use (``page_count - freelist_count`` pages, read from the file as the hub left it)
against the empty ledger's, per 1,000 sessions; each session here lasts seconds, so it has one
``charges`` row (a session over several UTC days has one per day).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sqlite3
import statistics
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from jupyter_gpuburst.bench import hub_memory_pods as pods
from jupyter_gpuburst.bench import stopping
from jupyter_gpuburst.bench.hubproc import HubProcess
from jupyter_gpuburst.core import keys
from jupyter_gpuburst.hub.accounting.settings import LEDGER_FILE
from jupyter_gpuburst.sim.config import FederationConfig, parse_config
from jupyter_gpuburst.sim.federation import Federation
from jupyter_gpuburst.sim.testing import running_federation

GPUS_PER_NODE = 8
CPU_NODES = 40
PODS_PER_NODE = 110
# about twice what 0.3.0 measured (docs/operating.md): a change that doubles what the hub holds
# per pod, or what the ledger writes per session, fails
HUB_RSS_LIMIT_MIB = 512.0
PER_1000_PODS_LIMIT_MIB = 32.0
LEDGER_PER_1000_LIMIT_BYTES = 1024**2
SEEN_TIMEOUT_S = 300.0
# The cluster stamps a pod's binding and deletion to the second, and the ledger ends a session
# it hears of late at the cluster's stamp, never before where it started: a pod deleted within
# the second it was bound in may count 0 GPU-seconds. Deleted as soon as the hub counted them,
# these pods lived 0.03-0.5 s, and a loaded run once found 6 of 20 sessions with any GPU-second
# after a minute. Each now lives past its second.
MIN_SESSION_S = 2.0


def federation_config(gpu_nodes: int) -> FederationConfig:
    """An origin of ``gpu_nodes`` 8-GPU nodes and ``CPU_NODES`` CPU nodes, and one donor."""
    origin = [
        {
            "name": pods.GPU_NODE_PREFIX,
            "count": gpu_nodes,
            "cpu": "128",
            "memory": "1Ti",
            "pods": PODS_PER_NODE,
            "resources": {pods.GPU: 8},
        },
        {"name": pods.CPU_NODE_PREFIX, "count": CPU_NODES, "cpu": "64", "memory": "256Gi", "pods": PODS_PER_NODE},
    ]
    donor = {
        "name": "donor-1",
        "nodes": [{"name": "donor-1-gpu", "count": 2, "cpu": "64", "memory": "512Gi", "resources": {pods.GPU: 8}}],
        "grant": {"cpu": "128", "memory": "1Ti", "pods": "220", pods.GPU: 16},
    }
    return parse_config({"origin": {"name": "origin", "nodes": origin}, "donors": [donor]}, "<bench hub-memory>")


def gpu_nodes_for(largest: int, sessions_batch: int = 0) -> int:
    return max(2, -(-max(pods.gpu_pods(largest), sessions_batch) // GPUS_PER_NODE))


HUB_CONFIG = f"""
from jupyter_gpuburst.hub import install
install(c)
c.JupyterHub.spawner_class = "gpuburst"
c.KubeSpawner.namespace = {pods.USERS_NAMESPACE!r}
c.KubeSpawner.profile_list = [{{"display_name": "One GPU", "slug": "gpu1", "default": True,
    "kubespawner_override": {{"extra_resource_limits": {{{pods.GPU!r}: "1"}}}}}}]
"""


def rss_mib(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2**20


def peak_mib(pid: int) -> float | None:
    """The process's resident high-water mark (VmHWM), None where /proc does not say."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


async def pods_counted(hub: HubProcess, session: aiohttp.ClientSession) -> int:
    """Bound pods the hub's tracker counts on the origin (the capacity JSON's pod slots in use)."""
    status, body = await hub.capacity(session)
    if status != 200 or not isinstance(body, dict) or not body.get("ready"):
        return -1
    origin = next((s for s in body["sites"] if s["site"] == keys.ORIGIN_SITE), None)
    return int(((origin or {}).get("compute") or {}).get("pods", {}).get("requested", 0))


async def wait_counted(hub: HubProcess, session: aiohttp.ClientSession, want: int, timeout: float = SEEN_TIMEOUT_S) -> tuple[int, float]:
    """Poll until the tracker counts ``want`` pods; (last count, seconds waited)."""
    started = time.monotonic()
    seen = -1
    while time.monotonic() - started < timeout:
        seen = await pods_counted(hub, session)
        if seen == want:
            break
        await asyncio.sleep(0.25)
    return seen, round(time.monotonic() - started, 2)


def node_names(fed: Federation) -> tuple[list[str], list[str]]:
    names = sorted(n["metadata"]["name"] for n in fed.origin.store.list("nodes")[0])
    gpu = [n for n in names if n.startswith(pods.GPU_NODE_PREFIX)]
    return gpu, [n for n in names if n.startswith(pods.CPU_NODE_PREFIX)]


class Bench:
    """A fresh federation and fresh hubs per phase, in ``workdir``.

    A phase's pods go with its federation, never deleted one by one: the emulator's store looks
    for each removed object's dependents among all objects, so 5,000 deletions took minutes of
    the benchmark's time that measure nothing of the hub.
    """

    def __init__(self, workdir: Path, gpu_nodes: int) -> None:
        self.workdir, self.config = workdir, federation_config(gpu_nodes)
        self.hubs = self.federations = 0
        self.gpu_nodes: list[str] = []
        self.cpu_nodes: list[str] = []

    @contextlib.asynccontextmanager
    async def federation(self) -> AsyncIterator[tuple[Federation, Path]]:
        self.federations += 1
        where = self.workdir / f"federation-{self.federations:02d}"
        kubeconfig = where / "kubeconfig"
        async with running_federation(self.config, where, kubeconfig=kubeconfig) as fed:
            # no process runs these pods: the objects are what the hub reads (hub_memory_pods.py)
            await fed.origin.kubelet.stop()
            self.gpu_nodes, self.cpu_nodes = node_names(fed)
            yield fed, kubeconfig

    async def started(self, session: aiohttp.ClientSession, kubeconfig: Path, want: int) -> tuple[HubProcess, int, float]:
        self.hubs += 1
        hub = HubProcess(self.workdir / f"hub-{self.hubs:02d}", HUB_CONFIG, env={"KUBECONFIG": str(kubeconfig)}, log_level="WARN")
        await hub.start()
        seen, waited = await wait_counted(hub, session, want)
        return hub, seen, waited

    async def memory_phase(self, session: aiohttp.ClientSession, count: int) -> dict[str, Any]:
        async with self.federation() as (fed, kubeconfig):
            hub, seen0, _ = await self.started(session, kubeconfig, 0)
            try:
                assert hub.proc is not None
                before = rss_mib(hub.proc.pid)
                pods.create_running(fed.origin.store, list(pods.mix(count, self.gpu_nodes, self.cpu_nodes, GPUS_PER_NODE)))
                seen_watched, watched_s = await wait_counted(hub, session, count)
                await asyncio.sleep(1.0)
                watched = rss_mib(hub.proc.pid)
            finally:
                await hub.stop()
            hub, seen_listed, listed_s = await self.started(session, kubeconfig, count)
            try:
                assert hub.proc is not None
                await asyncio.sleep(1.0)
                listed, peak = rss_mib(hub.proc.pid), peak_mib(hub.proc.pid)
            finally:
                await hub.stop()
        return {
            "pods": count,
            "seen": {"before": seen0, "watched": seen_watched, "listed": seen_listed},
            "seen_after_s": {"watched": watched_s, "listed": listed_s},
            "rss_before_mib": round(before, 1),
            "rss_watched_mib": round(watched, 1),
            "rss_listed_mib": round(listed, 1),
            "peak_mib": round(peak, 1) if peak is not None else None,
            "per_1000_pods_mib": round((listed - before) * 1000 / count, 2) if count else None,
        }

    async def ledger_phase(self, session: aiohttp.ClientSession, sessions: int) -> dict[str, Any]:
        async with self.federation() as (fed, kubeconfig):
            hub, _, _ = await self.started(session, kubeconfig, 0)
            ledger = hub.workdir / LEDGER_FILE
            try:
                empty = ledger_bytes(ledger)
                batch = len(self.gpu_nodes) * GPUS_PER_NODE
                for first in range(0, sessions, batch):
                    servers = [
                        pods.server_pod(i * pods.SERVER_EVERY, self.gpu_nodes[(i - first) // GPUS_PER_NODE])
                        for i in range(first, min(sessions, first + batch))
                    ]
                    created = time.monotonic()
                    made = pods.create_running(fed.origin.store, servers)
                    await wait_counted(hub, session, len(made))
                    await asyncio.sleep(max(0.0, MIN_SESSION_S - (time.monotonic() - created)))
                    pods.delete_all(fed.origin.store, made)
                    await wait_counted(hub, session, 0)
                ended, waited = await wait_ended(ledger, sessions)
            finally:
                await hub.stop()
        rows = ledger_rows(ledger)
        used = ledger_bytes(ledger)
        return {
            "sessions": sessions,
            "ended": ended,
            "ended_after_s": waited,
            "rows": rows,
            "empty_bytes": empty,
            "bytes": used,
            # on disk: the file and a write-ahead log the hub's stop did not fold in
            "file_bytes": sum(p.stat().st_size for p in (ledger, ledger.with_name(ledger.name + "-wal")) if p.exists()),
            "bytes_per_1000_sessions": round((used - empty) * 1000 / sessions) if sessions else None,
        }


def _read(path: Path, query: str) -> Any:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return db.execute(query).fetchone()
    finally:
        db.close()


def ledger_bytes(path: Path) -> int:
    """The ledger's bytes in use: its pages less the free ones, the write-ahead log's included."""
    pages, free, size = _read(path, "SELECT * FROM pragma_page_count, pragma_freelist_count, pragma_page_size")
    return int((pages - free) * size)


def ledger_rows(path: Path) -> dict[str, int]:
    return {table: int(_read(path, f"SELECT COUNT(*) FROM {table}")[0]) for table in ("sessions", "charges", "site_samples")}


async def wait_ended(path: Path, sessions: int, timeout: float = 60.0) -> tuple[int, float]:
    """Poll the ledger until ``sessions`` sessions have ended with GPU-seconds counted."""
    query = "SELECT COUNT(*) FROM sessions s WHERE ended IS NOT NULL AND (SELECT SUM(gpu_seconds) FROM charges c WHERE c.uid = s.uid) > 0"
    started = time.monotonic()
    ended = 0
    while time.monotonic() - started < timeout:
        ended = int(_read(path, query)[0])
        if ended >= sessions:
            break
        await asyncio.sleep(0.25)
    return ended, round(time.monotonic() - started, 2)


def checks(result: dict[str, Any]) -> dict[str, bool]:
    """Pass/fail over a finished run's JSON; each is False when its condition is violated."""
    phases = result["phases"]
    largest = max(result["pods"])
    at_largest = [p for p in phases if p["pods"] == largest]
    ledger = result["ledger"]
    # judged at the largest count: with few pods a MiB of noise is many MiB per 1,000
    per_1000 = max((p["per_1000_pods_mib"] for p in at_largest if p["per_1000_pods_mib"] is not None), default=None)
    out = {
        "every_pod_seen": all(p["seen"] == {"before": 0, "watched": p["pods"], "listed": p["pods"]} for p in phases),
        "hub_rss_within_limit": bool(at_largest)
        and max(max(p["rss_listed_mib"], p["peak_mib"] or 0) for p in at_largest) <= HUB_RSS_LIMIT_MIB,
        "per_1000_pods_within_limit": per_1000 is not None and per_1000 <= PER_1000_PODS_LIMIT_MIB,
    }
    if ledger is not None:
        out["ledger_every_session_ended"] = ledger["ended"] == ledger["sessions"] == ledger["rows"]["sessions"]
        out["ledger_within_limit"] = (
            ledger["bytes_per_1000_sessions"] is not None and ledger["bytes_per_1000_sessions"] <= LEDGER_PER_1000_LIMIT_BYTES
        )
    return out


def summarize(values: list[float]) -> dict[str, float | None]:
    return {
        "n": len(values),
        "min": round(min(values), 2) if values else None,
        "median": round(statistics.median(values), 2) if values else None,
        "max": round(max(values), 2) if values else None,
    }


async def run(counts: list[int], repeats: int, sessions: int, state_dir: Path) -> dict[str, Any]:
    bench = Bench(state_dir, gpu_nodes_for(max(counts), min(sessions, 1024)))
    started = time.monotonic()
    phases: list[dict[str, Any]] = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        for r in range(repeats):
            # alternating order: what drifts over a run falls on both sizes
            for count in counts if r % 2 == 0 else list(reversed(counts)):
                phases.append({"round": r, **await bench.memory_phase(session, count)})
        ledger = await bench.ledger_phase(session, sessions) if sessions else None
    per_count = {
        str(count): {
            field: summarize([p[field] for p in phases if p["pods"] == count and p[field] is not None])
            for field in ("rss_before_mib", "rss_watched_mib", "rss_listed_mib", "peak_mib", "per_1000_pods_mib")
        }
        for count in counts
    }
    result: dict[str, Any] = {
        "benchmark": "hub-memory",
        "pods": counts,
        "repeats": repeats,
        "nodes": {"origin_gpu": len(bench.gpu_nodes), "origin_cpu": len(bench.cpu_nodes), "donor_virtual": 1},
        "mix": {"hub_servers": f"1 in {pods.SERVER_EVERY}", "other_gpu_pods": f"1 in {pods.OTHER_GPU_EVERY}"},
        "by_pods": per_count,
        "per_1000_pods_mib": summarize([p["per_1000_pods_mib"] for p in phases if p["per_1000_pods_mib"] is not None]),
        "phases": phases,
        "ledger": ledger,
        "hubs_started": bench.hubs,
        "federations_started": bench.federations,
        "wall_s": round(time.monotonic() - started, 1),
        "cpus": os.cpu_count(),
        "memory_total_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "load_average": [round(v, 2) for v in os.getloadavg()],
    }
    result["checks"] = checks(result)
    result["ok"] = all(result["checks"].values())
    return result


def pod_counts(text: str) -> list[int]:
    """``500,5000`` -> [500, 5000]; ArgumentTypeError for anything but distinct positive counts."""
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give pod counts separated by commas, e.g. 500,5000") from None
    if not counts or min(counts) < 1 or len(set(counts)) != len(counts):
        raise argparse.ArgumentTypeError(f"{text!r}: each count must be positive and given once")
    return counts


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuburst bench hub-memory", description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=pod_counts, default=[500, 5000], help="pod counts to measure, comma-separated (default 500,5000)")
    parser.add_argument("--repeats", type=int, default=3, help="rounds over the pod counts, in alternating order (default 3)")
    parser.add_argument("--sessions", type=int, default=1000, help="GPU sessions recorded for the ledger's growth (default 1000; 0: skip)")
    parser.add_argument("--state-dir", type=Path, default=None, help="keep hub logs and ledgers here (default: a temp dir, removed)")
    parser.add_argument("--json", action="store_true", help="print one JSON object on one line")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.sessions < 0:
        parser.error("--sessions must not be negative")
    return stopping.run_and_print(
        lambda state_dir: run(args.pods, args.repeats, args.sessions, state_dir), args.state_dir, "hub-memory", args.json
    )
