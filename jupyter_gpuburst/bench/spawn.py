"""`gpuburst bench spawn`: many users start a 1-GPU server at once through a real JupyterHub.

One local federation (default 40 local + 160 donor GPUs) serves a fresh hub per phase. The two
phases are like for like and interleave for ``--repeats`` rounds, in alternating order (A B, B A,
A B, ...):

A. baseline: plain KubeSpawner with the same 1-GPU profile, the same Liqo virtual-node
   toleration, and kube-scheduler (the emulator's) choosing among origin nodes and the donor's
   virtual node; the namespace is offloaded beforehand, as an admin would;
B. GPUBurstSpawner with that profile, placing and pinning each pod itself.

Each user's spawn is one ``POST /hub/api/users/{name}/server`` that returns when the server
answers (the hub's slow-spawn timeout is raised so the request waits), so its duration is the
spawn time the user sees. The single-user command is ``bench/standin.py``, a few-MB HTTP
answerer: a real Jupyter server per user does not fit a 2-core machine at 200 users, and the
hub's readiness check only needs an HTTP answer.

Reported per phase: p50/p95/p99/max spawn time; per round the p95 ratio B/A; over rounds the
median ratio, its spread (min, max) and the medians of the A-first and B-first rounds apart
(``by_order``: how much a phase gains or loses by coming second, and the ratio with that taken
out). Checks (each can fail): every server ready, no ``FailedScheduling`` event on a pod
GPUBurstSpawner pinned (read from the API server), no redirect counted by the hub's own metrics
(with no competing load, a redirect means our own reservations or pinning were wrong), no extra
API reads per spawn, and a p95 ratio <= 1.05 both as the median of the rounds and with the
order's effect taken out, over an even number of rounds (each spawner first in half of them).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import psutil

from jupyter_gpuburst.bench import cpu_share, stats, stopping
from jupyter_gpuburst.bench.hubproc import HubProcess
from jupyter_gpuburst.bench.spawn_federation import (
    BENCHMARK_ROLE,
    ClearedPods,
    api_reads,
    clear_pods,
    cpu_roles,
    failed_scheduling,
    offload_namespace,
    pod_rss_mib,
    pod_sites,
    pod_states,
)
from jupyter_gpuburst.core import liqo
from jupyter_gpuburst.sim.config import FederationConfig, parse_config
from jupyter_gpuburst.sim.federation import CONTROL_PLANES, Federation
from jupyter_gpuburst.sim.testing import running_federation

GPU = "nvidia.com/gpu"
DONOR = "donor-1"
NAMESPACE = "default"
STANDIN = Path(__file__).with_name("standin.py")
GPUS_PER_LOCAL_NODE = 4
GPUS_PER_DONOR_NODE = 8
SHM = "/dev/shm"
# hub log level in --state-dir; DEBUG shows every reflector event when a spawn misbehaves
HUB_LOG_LEVEL = os.environ.get("GPUBURST_BENCH_HUB_LOG_LEVEL", "WARN")

# One GPU profile for both spawners. The toleration is the one GPUBurstSpawner adds for a donor
# placement: with it, kube-scheduler may put the baseline's pod on the donor's virtual node too.
GPU_PROFILE = {
    "display_name": "One GPU",
    "slug": "gpu1",
    "default": True,
    "kubespawner_override": {
        "extra_resource_limits": {GPU: "1"},
        "tolerations": [liqo.virtual_node_toleration()],
    },
}
PROFILES = [GPU_PROFILE]
BASELINE = "kubespawner.KubeSpawner"
GPUBURST = "gpuburst"
RATIO_GOAL = 1.05
EXTRA_READS_PER_SPAWN_LIMIT = 0.05


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (``bench.stats``); 0.0 when there are no values."""
    return stats.percentile(values, q) or 0.0


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
    data: dict[str, Any] = {"origin": {"name": "origin", "nodes": origin_nodes}, "donors": []}
    if donor_gpus:
        data["donors"].append(
            {
                "name": DONOR,
                "nodes": _node_groups(f"{DONOR}-gpu", donor_gpus, GPUS_PER_DONOR_NODE, 110),
                "grant": {"cpu": "1000", "memory": "8Ti", "pods": str(users + 110), GPU: donor_gpus},
            }
        )
    return parse_config(data, "<bench spawn>")


def api_timeout_lines(api_timeout: int | None) -> str:
    """Hub config setting KubeSpawner's per-request API timeout (and ten times that of retries,
    at least KubeSpawner's 30 s); none for None (KubeSpawner's 3 s)."""
    if api_timeout is None:
        return ""
    return f"c.KubeSpawner.k8s_api_request_timeout = {api_timeout!r}\nc.KubeSpawner.k8s_api_request_retry_timeout = {max(30, 10 * api_timeout)!r}\n"


def hub_config(spawner: str, start_timeout: int = 600, extra: str = "", api_timeout: int | None = None) -> str:
    """Hub config lines on top of ``HubProcess``'s base: the spawner and the stand-in server.

    ``api_timeout``: KubeSpawner's per-request API timeout in seconds, for both spawners alike
    (None keeps KubeSpawner's default, 3 s per request and 30 s of retries).
    """
    extra = api_timeout_lines(api_timeout) + extra
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


@dataclass
class PhaseResult:
    spawner: str
    requested: int
    ready: int = 0
    failures: list[str] = field(default_factory=list)
    spawn_s: list[float] = field(default_factory=list)
    api_reads: int = 0
    wall_s: float = 0.0
    pod_rss_mib: float = 0.0
    hub_rss_mib: float = 0.0
    redirects: float = 0.0
    failed_scheduling: int = 0
    sites: dict[str, int] = field(default_factory=dict)
    spawn_s_by_site: dict[str, list[float]] = field(default_factory=dict)
    events_left: int = 0  # events on the origin's API server after the phase, before clearing
    cpu: dict[str, Any] = field(default_factory=dict)  # cpu_share's summary of the spawns
    cleared: ClearedPods | None = None  # the clearing after the phase, before the next one

    def summary(self) -> dict[str, Any]:
        return {
            "spawner": self.spawner,
            "requested": self.requested,
            "ready": self.ready,
            **{f"{k}_spawn_s": round(v, 3) for k, v in quantiles(self.spawn_s).items()},
            "wall_s": round(self.wall_s, 2),
            "api_reads": self.api_reads,
            "failed_scheduling": self.failed_scheduling,
            "redirects": int(self.redirects),
            "sites": self.sites,
            # where the tail is: the origin's spawns and the donor's apart
            "spawn_s_by_site": {
                site: {"n": len(values), **{k: round(v, 3) for k, v in quantiles(values).items()}}
                for site, values in sorted(self.spawn_s_by_site.items())
            },
            "events_left": self.events_left,
            "cpu": self.cpu,
            # late: pods made after the phase ended, which a single pass would have left running
            "cleared_after": None if self.cleared is None else asdict(self.cleared),
        }


def quantiles(values: list[float]) -> dict[str, float]:
    return {
        "p50": percentile(values, 50),
        "p95": percentile(values, 95),
        "p99": percentile(values, 99),
        "max": max(values, default=0.0),
    }


async def spawn_all(hub: HubProcess, session: aiohttp.ClientSession, users: list[str], profile: str) -> tuple[dict[str, float], list[str]]:
    """Every user's spawn at once; returns (seconds of each successful spawn by user, failure texts)."""

    async def one(name: str) -> tuple[float | None, str | None]:
        started = time.monotonic()
        status, body = await hub.request(session, "POST", f"/users/{name}/server", json={"profile": profile})
        elapsed = time.monotonic() - started
        if status == 201:
            return elapsed, None
        return None, f"{name}: HTTP {status}: {str(body)[:300]}"

    outcomes = await asyncio.gather(*(one(u) for u in users))
    return ({u: s for u, (s, _) in zip(users, outcomes, strict=True) if s is not None}, [f for _, f in outcomes if f is not None])


async def run_phase(
    fed: Federation,
    workdir: Path,
    kubeconfig: Path,
    spawner: str,
    users: int,
    prefix: str,
    start_timeout: int,
    api_timeout: int | None = None,
    hub_db: str = "tmpfs",
) -> PhaseResult:
    result = PhaseResult(spawner=spawner, requested=users)
    db_dir = tempfile.mkdtemp(prefix="gpuburst-bench-hub-db-", dir=SHM) if hub_db == "tmpfs" else None
    extra = f"c.JupyterHub.db_url = {f'sqlite:///{db_dir}/jupyterhub.sqlite'!r}\n" if db_dir else ""
    hub = HubProcess(
        workdir,
        hub_config(spawner, start_timeout, extra, api_timeout=api_timeout),
        env={"KUBECONFIG": str(kubeconfig)},
        log_level=HUB_LOG_LEVEL,
    )
    try:
        return await _run_phase(fed, hub, result, spawner, users, prefix)
    finally:
        if db_dir is not None:
            shutil.rmtree(db_dir, ignore_errors=True)


async def _run_phase(fed: Federation, hub: HubProcess, result: PhaseResult, spawner: str, users: int, prefix: str) -> PhaseResult:
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
            if spawner == GPUBURST and status != 200:
                raise RuntimeError(f"capacity API: HTTP {status}: {body}")
            reads_before = api_reads(fed)
            cpu = cpu_share.CPUShare(cpu_roles(fed, hub), {"hub": "proxy", BENCHMARK_ROLE: "pods"})
            stop = asyncio.Event()
            sampler = asyncio.create_task(cpu.run(stop))
            started = time.monotonic()
            try:
                by_user, result.failures = await spawn_all(hub, session, names, GPU_PROFILE["slug"])
            finally:
                stop.set()
                await sampler
            result.cpu = cpu.summary()
            result.spawn_s = list(by_user.values())
            result.wall_s = time.monotonic() - started
            result.api_reads = api_reads(fed) - reads_before
            result.ready = len(result.spawn_s)
            result.pod_rss_mib = pod_rss_mib(fed)
            if hub.proc is not None:
                result.hub_rss_mib = psutil.Process(hub.proc.pid).memory_info().rss / 2**20
            where = pod_sites(fed, f"jupyter-{prefix}")
            for site in where.values():
                result.sites[site] = result.sites.get(site, 0) + 1
            for user, seconds in by_user.items():
                result.spawn_s_by_site.setdefault(where.get(f"jupyter-{user}", "unbound"), []).append(seconds)
            result.failed_scheduling = failed_scheduling(fed, f"jupyter-{prefix}")
            if result.failures:
                result.failures.append(f"pods: {pod_states(fed)}")
            if spawner == GPUBURST:
                result.redirects = await metric_sum(hub, session, "jupyterhub_gpuburst_redirects_total")
    finally:
        await hub.stop(timeout=30)
        result.events_left = len(fed.origin.store.list("events")[0])
        result.cleared = await clear_pods(fed)
    return result


def by_order(per_round: list[float | None]) -> dict[str, float | None]:
    """Median ratio of the rounds run A first (even rounds), of those run B first (odd), and the
    ratio with the order's effect taken out.

    If coming second in a round makes a phase faster by a factor k, an A-first round measures
    r / k and a B-first round r * k; the geometric mean of the two medians is r. The median of
    all rounds together does not cancel k: it lands between the highest A-first and the lowest
    B-first round, wherever the spread puts them.
    """
    ab = [v for r, v in enumerate(per_round) if r % 2 == 0 and v is not None]
    ba = [v for r, v in enumerate(per_round) if r % 2 == 1 and v is not None]
    ab_median = statistics.median(ab) if ab else None
    ba_median = statistics.median(ba) if ba else None
    both = ab_median is not None and ba_median is not None
    return {
        "AB": round(ab_median, 3) if ab_median is not None else None,
        "BA": round(ba_median, 3) if ba_median is not None else None,
        "order_cancelled": round(math.sqrt(ab_median * ba_median), 3) if both else None,
    }


def ratio(a: float, b: float) -> float | None:
    return round(a / b, 3) if b > 0 else None


def checks(result: dict[str, Any], ratio_goal: float = RATIO_GOAL) -> dict[str, bool]:
    """Pass/fail over a finished run's JSON; each is False when its condition is violated."""
    phases = result["phases"]
    gpu = [p for p in phases if p["spawner"] == GPUBURST]
    median = result["p95_ratio"]["median"]
    cancelled = result["p95_ratio"]["by_order"]["order_cancelled"]
    return {
        "all_ready": bool(phases) and all(p["ready"] == p["requested"] for p in phases),
        "no_failed_scheduling_of_pinned_pods": bool(gpu) and all(p["failed_scheduling"] == 0 for p in gpu),
        "no_redirects": bool(gpu) and all(p["redirects"] == 0 for p in gpu),
        # like for like: each phase left the federation clear for the next (clear_pods)
        "every_phase_cleared": all(not (p.get("cleared_after") or {}).get("left") for p in phases),
        # a watch that reconnects re-lists once per hub, not per spawn: allow a few, never one per spawn
        "no_extra_api_reads": result["extra_api_reads_per_spawn"] < EXTRA_READS_PER_SPAWN_LIMIT,
        # both estimates, over rounds where each spawner went first equally often
        "p95_ratio_within_goal": median is not None
        and median <= ratio_goal
        and cancelled is not None
        and cancelled <= ratio_goal
        and result["p95_ratio"]["order_balanced"],
    }


async def run(
    users: int,
    local_gpus: int,
    donor_gpus: int,
    state_dir: Path,
    start_timeout: int = 600,
    repeats: int = 6,
    api_timeout: int | None = None,
    hub_db: str | None = None,
    control_plane: str = "emulator",
) -> dict[str, Any]:
    hub_db = hub_db or ("tmpfs" if os.path.isdir(SHM) else "disk")
    kubeconfig = state_dir / "kubeconfig"
    config = federation_config(local_gpus, donor_gpus, users)
    rounds: list[tuple[PhaseResult, PhaseResult]] = []
    async with running_federation(config, state_dir=state_dir / "sim", kubeconfig=kubeconfig, control_plane=control_plane) as fed:
        if control_plane == "kube":  # both hubs as the hub's ServiceAccount, installed as the docs say
            from jupyter_gpuburst.sim.kube import deployment

            kubeconfig = deployment.hub_kubeconfig(fed.origin, state_dir / "hub-account", users=NAMESPACE, donors=fed.donors)
        if donor_gpus:
            offload_namespace(fed, NAMESPACE)
        for r in range(repeats):
            # each round is one like-for-like pair on the same federation; the order alternates
            # (AB, BA, AB, ...) so that whatever drifts during the run (the federation's store,
            # the page cache, the machine's other work) does not always fall on the same side
            async def phase(spawner: str, tag: str, r: int = r) -> PhaseResult:
                return await run_phase(
                    fed, state_dir / f"hub-{tag}{r}", kubeconfig, spawner, users, f"{tag}{r}u", start_timeout, api_timeout, hub_db
                )

            if r % 2 == 0:
                base = await phase(BASELINE, "a")
                gpu = await phase(GPUBURST, "b")
            else:
                gpu = await phase(GPUBURST, "b")
                base = await phase(BASELINE, "a")
            rounds.append((base, gpu))
    phases = [p for r, pair in enumerate(rounds) for p in (pair if r % 2 == 0 else pair[::-1])]  # as they ran
    p95_ratios = [ratio(percentile(g.spawn_s, 95), percentile(b.spawn_s, 95)) for b, g in rounds]
    p50_ratios = [ratio(percentile(g.spawn_s, 50), percentile(b.spawn_s, 50)) for b, g in rounds]
    known95 = [v for v in p95_ratios if v is not None]
    known50 = [v for v in p50_ratios if v is not None]
    extra_reads = sum(g.api_reads - b.api_reads for b, g in rounds) / max(1, len(rounds))
    all_gpu = [s for _, g in rounds for s in g.spawn_s]
    all_base = [s for b, _ in rounds for s in b.spawn_s]
    result: dict[str, Any] = {
        "benchmark": "spawn",
        "control_plane": control_plane,
        "requested": users,
        "repeats": repeats,
        "order": " ".join("AB" if r % 2 == 0 else "BA" for r in range(repeats))
        + " (A: KubeSpawner + kube-scheduler, B: GPUBurstSpawner), same 1-GPU profile and toleration",
        "local_gpus": local_gpus,
        "donor_gpus": donor_gpus,
        # KubeSpawner's per-request API timeout, the same for both spawners (null: its default, 3 s)
        "k8s_api_request_timeout_s": api_timeout,
        # where both hubs keep their SQLite database: "tmpfs" (default) or "disk" (see --hub-db)
        "hub_db": hub_db,
        # every phase starts with no events (clear_events); each phase's count is in "phases"
        "events_cleared_between_phases": True,
        "phases": [p.summary() for p in phases],
        "p95_ratio": {
            "per_round": p95_ratios,
            "median": round(statistics.median(known95), 3) if known95 else None,
            "min": min(known95, default=None),
            "max": max(known95, default=None),
            "goal": RATIO_GOAL,
            # the second phase of a round can gain or lose by coming second: with as many BA
            # rounds as AB rounds that cancels out of the median; the two medians show its size
            "by_order": by_order(p95_ratios),
            "order_balanced": repeats % 2 == 0,
        },
        "p50_ratio": {
            "per_round": p50_ratios,
            "median": round(statistics.median(known50), 3) if known50 else None,
            "min": min(known50, default=None),
            "max": max(known50, default=None),
        },
        "pooled_spawn_s": {
            "gpuburst": {k: round(v, 3) for k, v in quantiles(all_gpu).items()},
            "baseline": {k: round(v, 3) for k, v in quantiles(all_base).items()},
            "samples_each": len(all_gpu),
        },
        "failed_scheduling_pinned": sum(g.failed_scheduling for _, g in rounds),
        "failed_scheduling_baseline": sum(b.failed_scheduling for b, _ in rounds),
        "redirects": int(sum(g.redirects for _, g in rounds)),
        "extra_api_reads_per_spawn": round(extra_reads / users, 3),
        "standin_rss_mib_total": round(max((p.pod_rss_mib for p in phases), default=0.0), 1),
        "hub_rss_mib": round(max((g.hub_rss_mib for _, g in rounds), default=0.0), 1),
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "failures": [f for p in phases for f in p.failures][-6:],
    }
    result["checks"] = checks(result)
    result["ok"] = all(result["checks"].values())
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuburst bench spawn", description=__doc__.splitlines()[0])
    parser.add_argument("--concurrent", type=int, default=200, help="users spawning at once (default 200)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=6,
        help="A/B rounds, interleaved in alternating order (default 6; an even number, so that each spawner goes first equally often)",
    )
    parser.add_argument("--local-gpus", type=int, default=None, help="GPUs on the origin (default: a fifth of --concurrent, 40 for 200)")
    parser.add_argument("--donor-gpus", type=int, default=None, help="GPUs the donor grants (default: the rest, 160 for 200)")
    parser.add_argument("--start-timeout", type=int, default=600, help="seconds one spawn may take before the hub gives up")
    parser.add_argument(
        "--api-request-timeout",
        type=int,
        default=None,
        help="KubeSpawner's k8s_api_request_timeout for both spawners alike, seconds (default: KubeSpawner's, 3)",
    )
    parser.add_argument(
        "--hub-db",
        choices=("tmpfs", "disk"),
        default="tmpfs" if os.path.isdir(SHM) else "disk",
        help="where both hubs keep their SQLite database: tmpfs (default, /dev/shm) or disk (the state dir). "
        "JupyterHub commits it about 28 times per spawn, the same for both spawners; on a disk shared with "
        "other work those fsyncs, not the spawners, decide the spawn times",
    )
    parser.add_argument(
        "--control-plane",
        choices=CONTROL_PLANES,
        default="emulator",
        help="'kube': every site on its own real control plane (make kube), kube-scheduler placing the baseline's "
        "pods, both hubs as the hub's ServiceAccount (default: %(default)s)",
    )
    parser.add_argument("--state-dir", type=Path, default=None, help="keep hub logs and pod logs here (default: a temp dir, removed)")
    parser.add_argument("--json", action="store_true", help="print one JSON object on one line")
    args = parser.parse_args(argv)
    if args.control_plane == "kube":
        from jupyter_gpuburst.sim.kube import deployment

        if why := deployment.unavailable():
            parser.exit(2, f"gpuburst bench spawn: {why}\n")
    if args.concurrent < 1:
        parser.error("--concurrent must be at least 1")
    if args.repeats < 2 or args.repeats % 2:
        parser.error("--repeats must be an even number (each spawner goes first in half the rounds)")
    local = args.local_gpus if args.local_gpus is not None else args.concurrent // 5
    donor = args.donor_gpus if args.donor_gpus is not None else args.concurrent - local
    if local < 0 or donor < 0:
        parser.error("--local-gpus and --donor-gpus must not be negative")
    return stopping.run_and_print(
        lambda state_dir: run(
            args.concurrent,
            local,
            donor,
            state_dir,
            args.start_timeout,
            args.repeats,
            args.api_request_timeout,
            args.hub_db,
            args.control_plane,
        ),
        args.state_dir,
        "spawn",
        args.json,
    )
