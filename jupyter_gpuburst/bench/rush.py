"""`gpuburst bench rush`: a lab's 9:00 rush, students pressing Start within a minute, with and without warm pools.

Four arms, interleaved over ``--rounds`` (round 1: kernel+pools, kernel, server, server+pools;
round 2 the reverse; and so on): **kernel mode** (a CPU server, then a GPU kernel placed by the
hub) and **server mode** (a whole GPU server), each with warm pools sized for the rush and
without (``rush_setup.arm_setup``: placeholders of the GPU server profile in server mode;
pre-started GPU kernels, and the CPU server image pre-pulled on the origin, in kernel mode). Each arm runs on a fresh federation of ``sim/rush.yaml``'s cold nodes (the CUDA image
is on no node; it is pulled at the site's bandwidth) and a fresh real JupyterHub with
GPUBurstSpawner; with pools, the pools fill and pull first (the half hour before the lab), and
the rush starts once every placeholder is ready.

``--students`` students press Start at times drawn from the lab-start shape of ``bench trace``
(exponential arrivals), squeezed into ``--window`` seconds. Each student's clock starts at
their Start (``POST /hub/api/users/<name>/server``) and stops:

- server mode: when JupyterLab answers through the hub's proxy (``GET /user/<name>/lab``);
- kernel mode: when their first cell on a GPU kernel has executed: JupyterLab answers, the
  kernel is asked of the hub's GPU kernel API with the user's token (as the server's provisioner
  asks), and an ``execute_request`` is answered over ZMQ with the connection key the student chose.

What is real and what is scaled: JupyterHub, its proxy, GPUBurstSpawner, KubeSpawner, the kernel
API, the warm pools, the queue and the federation emulator (API servers, scheduler with
preemption, kubelets pulling images, Liqo reflection) are the product and run for every
student. The user servers are ``bench/standin.py`` (answers HTTP as JupyterLab's URL does) and
the kernels ``bench/standin_kernel.py`` (answers the Jupyter protocol, runs no code): 500
JupyterLabs and ipykernels do not fit a 2-core machine. The federation runs in a process of
its own (``gpuburst sim --config``, ``bench/rush_federation.py``) and every check reads it
through its clusters' Kubernetes API. The JSON says so in ``scaled``.

Checks (``checks``, ``ok``; exit status 1 when one fails): kernel mode with pools has p95 at most
``--p95-goal`` (10 s); nothing double-booked (sampled every second from every cluster's API
server: no node ever had pods bound beyond its allocatable GPUs, a preempted placeholder
included; ``double_booked_samples_missed`` counts the samples a busy API server did not give);
every student ran or was refused with a short reason; every pool was ready before the rush.
``--mode kernel`` (or ``server``) runs one mode's two arms only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import secrets
import sqlite3
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

from jupyter_gpuburst.bench import cpu_share, stats, stopping
from jupyter_gpuburst.bench.chaos import is_clear
from jupyter_gpuburst.bench.hubproc import HubProcess
from jupyter_gpuburst.bench.kernel_client import run_cell, user_tokens
from jupyter_gpuburst.bench.ledger_check import LEDGER_FILE
from jupyter_gpuburst.bench.rush_federation import FederationView, federation_process
from jupyter_gpuburst.bench.rush_setup import (
    CPU_PROFILE,
    GPU_PROFILE,
    KERNEL_PROFILE,
    ArmSetup,
    Shape,
    arm_setup,
    federation_data,
    hub_config,
)
from jupyter_gpuburst.bench.spawn import NAMESPACE, metric_sum
from jupyter_gpuburst.hub.accounting.ledger import POOL_TARGET
from jupyter_gpuburst.sim.federation import CONTROL_PLANES

HUB_LOG_LEVEL = os.environ.get("GPUBURST_BENCH_HUB_LOG_LEVEL", "WARN")
QUEUE_METRIC = "jupyterhub_gpuburst_spawn_queue_length"
SCALED = {
    "real": "JupyterHub and its proxy, GPUBurstSpawner and KubeSpawner, the hub's GPU kernel API, warm pools and queue, "
    "the federation emulator (API servers, scheduler with preemption, kubelets pulling cold images, Liqo) for every student",
    "stand_ins": "user servers answer HTTP as JupyterLab's URL does (bench/standin.py); GPU kernels answer the Jupyter "
    "protocol over ZMQ and run no code (bench/standin_kernel.py; pre-started, they wait for the adopter's connection "
    "file as the real entry point does, kernel/pod.py, without importing ipykernel); the kernel API is called with the "
    "user's token as the server's provisioner calls it; the CPU server image an image puller keeps on the origin's "
    "nodes (z2jh's continuous pre-puller, a DaemonSet the emulator does not run) is on them from the start",
    "nodes": "rush.yaml's node shapes, images, sizes and bandwidths; node counts scaled to the class",
    "federation": "the emulator runs in a process of its own (gpuburst sim --config, on the same machine); the "
    "benchmark reads its checks through each cluster's Kubernetes API",
}


@dataclass
class Student:
    user: str
    at: float
    outcome: str = "none"  # ran | refused | lost
    reason: str = ""
    seconds: float | None = None
    site: str | None = None
    queued: bool = False
    server_s: float | None = None  # kernel mode: Start -> the CPU server's JupyterLab answering
    kernel_s: float | None = None  # kernel mode: the kernel asked of the hub -> running (placed, started or adopted)
    cell_s: float | None = None  # kernel mode: running -> the first cell's reply
    adopted: bool = False  # kernel mode: the kernel was a pre-started one


@dataclass
class Arm:
    setup: ArmSetup
    round: int
    students: list[Student] = field(default_factory=list)
    warm_up_s: float | None = None
    pools_ready: bool = True
    double_booked_max: int = 0
    double_booked_missed: int = 0  # samples not read (an API server too busy to answer)
    queue_max: float = 0.0
    queue_student_s: float = 0.0
    pool_gpu_hours: float = 0.0
    wall_s: float = 0.0
    cpu: dict[str, Any] = field(default_factory=dict)  # cpu_share's summary of the rush

    def summary(self) -> dict[str, Any]:
        times = [s.seconds for s in self.students if s.outcome == "ran" and s.seconds is not None]
        return {
            "arm": self.setup.name,
            "round": self.round,
            "ran": sum(s.outcome == "ran" for s in self.students),
            "refused": sum(s.outcome == "refused" for s in self.students),
            "lost": sum(s.outcome == "lost" for s in self.students),
            "refused_reasons": dict(Counter(s.reason for s in self.students if s.outcome == "refused").most_common(5)),
            "lost_detail": [f"{s.user}: {s.reason[:160]}" for s in self.students if s.outcome == "lost"][:5],
            "start_s": quantiles(times),
            "server_up_s": quantiles([s.server_s for s in self.students if s.server_s is not None]),
            # kernel mode, where the time went: the kernel's placement and start, then the first cell
            "kernel_s": self._by_site(lambda s: s.kernel_s),
            "first_cell_s": quantiles([s.cell_s for s in self.students if s.cell_s is not None]),
            "adopted_prestarted": sum(s.adopted for s in self.students),
            "by_site": {
                site: quantiles([s.seconds for s in self.students if s.outcome == "ran" and s.site == site and s.seconds is not None])
                for site in sorted({s.site or "?" for s in self.students if s.outcome == "ran"})
            },
            "queue": {
                "students_queued": sum(s.queued for s in self.students),
                "max_length": self.queue_max,
                "student_s": round(self.queue_student_s, 1),
            },
            "pools": {
                **self.setup.describe(),
                "warm_up_s": self.warm_up_s,
                "ready_before_rush": self.pools_ready,
                "gpu_hours_held": round(self.pool_gpu_hours, 3),
            },
            "double_booked_max": self.double_booked_max,
            "double_booked_samples_missed": self.double_booked_missed,
            "wall_s": round(self.wall_s, 1),
            "cpu": self.cpu,
        }

    def _by_site(self, value: Any) -> dict[str, Any]:
        mine = [(s.site or "?", value(s)) for s in self.students]
        mine = [(site, v) for site, v in mine if v is not None]
        return {
            "all": quantiles([v for _, v in mine]),
            **{site: quantiles([v for s, v in mine if s == site]) for site in sorted({s for s, _ in mine})},
        }


def quantiles(values: list[float]) -> dict[str, Any]:
    q = {f"p{p}": stats.percentile(values, p) for p in (50, 95, 99)}
    return {
        "n": len(values),
        **{k: (round(v, 3) if v is not None else None) for k, v in q.items()},
        "max": round(max(values), 3) if values else None,
    }


def lab_start_arrivals(n: int, window: float, rng: random.Random) -> list[float]:
    """``bench trace``'s lab start (exponential arrivals, mean a quarter of the window), within ``window``."""
    out = []
    while len(out) < n:
        t = rng.expovariate(4 / window)
        if t < window:
            out.append(t)
    return sorted(out)


def _message(body: Any) -> str:
    return str(body.get("message") or "") if isinstance(body, dict) else str(body or "")


def _refused(student: Student, message: str) -> None:
    student.reason = message.strip()
    student.outcome = "refused" if is_clear(student.reason) else "lost"


async def _server_up(hub: HubProcess, http: aiohttp.ClientSession, student: Student, profile: str, deadline: float) -> bool:
    """Start the student's server and wait until JupyterLab answers; False: refused or lost (noted)."""
    try:
        status, body = await hub.request(http, "POST", f"/users/{student.user}/server", json={"profile": profile})
    except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
        student.reason = f"the hub did not answer the start: {type(exc).__name__}"
        student.outcome = "lost"
        return False
    if status not in (201, 202):
        _refused(student, _message(body))
        return False
    while status == 202:  # the hub answered before the server was up: look, as the spawn page does
        _, model = await hub.request(http, "GET", f"/users/{student.user}")
        server = ((model or {}).get("servers") or {}).get("")
        if server and server.get("ready"):
            break
        if not server or not server.get("pending") or time.monotonic() > deadline:
            # what the spawn page says of a start that failed after the hub answered 202
            reason = await _failed_progress(hub, http, student.user)
            if reason:
                _refused(student, reason)
            else:
                student.outcome, student.reason = "lost", "the server's start ended without a server or a reason"
            return False
        await asyncio.sleep(0.5)
    while time.monotonic() < deadline:
        with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
            async with http.get(f"{hub.url}/user/{student.user}/lab", headers=hub.headers(), allow_redirects=False) as resp:
                if resp.status < 400:
                    return True
        await asyncio.sleep(0.2)
    student.outcome, student.reason = "lost", "JupyterLab did not answer"
    return False


async def _failed_progress(hub: HubProcess, http: aiohttp.ClientSession, user: str) -> str:
    """The failed event's message of the spawn's progress stream (JupyterHub keeps the failed
    spawn's exception for it), without its "Spawn failed: " prefix; "" when there is none."""
    with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, ValueError):
        async with http.get(
            f"{hub.api}/users/{user}/server/progress", headers=hub.headers(), timeout=aiohttp.ClientTimeout(total=10)
        ) as resp:
            async for raw in resp.content:
                line = raw.decode(errors="replace").strip()
                if line.startswith("data:"):
                    event = json.loads(line[5:])
                    if event.get("failed"):
                        # JupyterHub's bare "Spawn failed" says nothing of why
                        message = str(event.get("message") or "")
                        return message.removeprefix("Spawn failed: ") if message.startswith("Spawn failed: ") else ""
    return ""


async def kernel_journey(hub: HubProcess, http: aiohttp.ClientSession, student: Student, token: str, deadline: float) -> None:
    """A CPU server, then a GPU kernel from the hub, then the first cell (see the module docstring)."""
    t0 = time.monotonic()
    if not await _server_up(hub, http, student, CPU_PROFILE, deadline):
        return
    student.server_s = time.monotonic() - t0
    asked = time.monotonic()
    key = secrets.token_hex(32)
    api = f"{hub.url}/services/gpuburst/api/kernels"
    headers = {"Authorization": f"token {token}"}
    body = {"profile": KERNEL_PROFILE, "key": key, "signature_scheme": "hmac-sha256", "kernel_id": str(uuid.uuid4()), "server_name": ""}
    async with http.post(api, json=body, headers=headers) as resp:
        record = await resp.json(content_type=None) if resp.status < 500 or resp.content_type == "application/json" else {}
        if resp.status != 202:
            _refused(student, _message(record) or resp.reason or "")
            return
    while record.get("state") == "pending" and time.monotonic() < deadline:
        student.queued = student.queued or record.get("queue") is not None
        async with http.get(f"{api}/{record['id']}", params={"wait": "5"}, headers=headers) as resp:
            record = await resp.json(content_type=None)
    if record.get("state") != "running":
        _refused(student, str(record.get("error") or f"the GPU kernel is {record.get('state')}"))
        return
    student.site, student.adopted = record.get("site"), bool(record.get("prestarted"))
    running = time.monotonic()
    student.kernel_s = running - asked
    if await run_cell(record["connection"], key, deadline):
        student.outcome, student.seconds = "ran", time.monotonic() - t0
        student.cell_s = time.monotonic() - running
    else:
        student.outcome, student.reason = "lost", "the first cell got no reply"


async def server_journey(hub: HubProcess, http: aiohttp.ClientSession, fed: FederationView, student: Student, deadline: float) -> None:
    t0 = time.monotonic()
    if await _server_up(hub, http, student, GPU_PROFILE, deadline):
        student.outcome, student.seconds = "ran", time.monotonic() - t0
        student.site = await fed.site_of(NAMESPACE, f"jupyter-{student.user}")


async def placeholders_ready(fed: FederationView) -> int:
    """The pools' pods that wait ready: running, and a pre-started kernel's imports done (Ready)."""
    return sum(1 for p in await fed.pools_ready(NAMESPACE) if _ready(p) and not p["metadata"].get("deletionTimestamp"))


def _ready(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    return status.get("phase") == "Running" and conditions.get("Ready", "True") == "True"


def pool_gpu_hours(workdir: Path) -> float:
    """GPU-hours the hub's ledger counted for the pools (mode ``pool``), open sessions up to now."""
    path = workdir / LEDGER_FILE
    if not path.exists():
        return 0.0
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=30)
    try:
        rows = db.execute(
            "SELECT s.count, s.counted_until, s.ended, COALESCE(SUM(c.gpu_seconds), 0) FROM sessions s "
            "LEFT JOIN charges c ON c.uid = s.uid WHERE s.mode = ? GROUP BY s.uid",
            (POOL_TARGET,),
        ).fetchall()
    finally:
        db.close()
    now = time.time()
    return sum(charged + (0.0 if ended is not None else max(0.0, now - until) * count) for count, until, ended, charged in rows) / 3600


async def watch(arm: Arm, fed: FederationView, hub: HubProcess, http: aiohttp.ClientSession, stop: asyncio.Event) -> None:
    """Every second: GPUs bound twice on any node (every cluster's API) and the hub's queue."""
    last = time.monotonic()
    while not stop.is_set():
        try:
            arm.double_booked_max = max(arm.double_booked_max, await fed.overcommitted())
        except (ApiException, aiohttp.ClientError, asyncio.TimeoutError):
            arm.double_booked_missed += 1  # said in the JSON: a sample the busy API servers did not give
        with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, ValueError):
            length = await metric_sum(hub, http, QUEUE_METRIC)
            now = time.monotonic()
            arm.queue_max = max(arm.queue_max, length)
            arm.queue_student_s += length * (now - last)
            last = now
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(stop.wait(), 1.0)


async def run_arm(setup: ArmSetup, round_: int, shape: Shape, arrivals: list[float], args: argparse.Namespace, state_dir: Path) -> Arm:
    arm = Arm(setup, round_)
    users = [f"s{i:03d}" for i in range(len(arrivals))]
    arm.students = [Student(u, t) for u, t in zip(users, arrivals, strict=True)]
    work = state_dir / f"r{round_}-{setup.name}"
    data = federation_data(shape, args.pull_speedup, setup.pulled)
    async with federation_process(data, work / "sim", args.control_plane, NAMESPACE) as fed:
        hub = HubProcess(
            work / "hub",
            hub_config(setup, users, args.start_timeout, args.api_request_timeout, args.hub_sqlite == "wal"),
            env={"KUBECONFIG": str(fed.hub_kubeconfig)},
            log_level=HUB_LOG_LEVEL,
        )
        try:
            await hub.start(timeout=180)
            async with aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0), timeout=aiohttp.ClientTimeout(total=args.start_timeout + 120)
            ) as http:
                tokens = await user_tokens(hub, http, users, "bench rush") if setup.mode == "kernel" else {}
                if setup.warm:
                    arm.warm_up_s, arm.pools_ready = await warm_up(fed, setup.warm, args.warm_up_timeout)
                stop = asyncio.Event()
                watcher = asyncio.create_task(watch(arm, fed, hub, http, stop))
                roles: dict[str, Any] = {"hub": hub.proc.pid if hub.proc else -1, "federation": fed.pid or -1, "benchmark": os.getpid()}
                if control_plane := fed.control_plane_pids():
                    roles[cpu_share.CONTROL_PLANE] = control_plane
                cpu = cpu_share.CPUShare(roles, {"hub": "proxy", "federation": "pods"})
                sampler = asyncio.create_task(cpu.run(stop))
                started = time.monotonic()
                deadline = started + arrivals[-1] + args.start_timeout + 60

                async def one(student: Student) -> None:
                    await asyncio.sleep(student.at)
                    if setup.mode == "kernel":
                        await kernel_journey(hub, http, student, tokens[student.user], deadline)
                    else:
                        await server_journey(hub, http, fed, student, deadline)

                try:
                    await asyncio.gather(*(one(s) for s in arm.students))
                except BaseException:
                    # stopped (SIGTERM, Ctrl-C) or failed: the samplers' last look, a minute on a
                    # loaded federation, must not hold up stopping the hub and the federation
                    watcher.cancel()
                    sampler.cancel()
                    raise
                finally:
                    stop.set()
                    for task in (watcher, sampler):
                        with contextlib.suppress(asyncio.CancelledError):
                            await task
                arm.wall_s = time.monotonic() - started
                arm.cpu = cpu.summary()
                arm.double_booked_max = max(arm.double_booked_max, await fed.overcommitted())
                arm.pool_gpu_hours = pool_gpu_hours(hub.workdir)
        finally:
            await asyncio.shield(kill(hub))
    return arm


async def warm_up(fed: FederationView, placeholders: int, timeout: float) -> tuple[float, bool]:
    """Until every placeholder runs (its image pulled): the pools' half hour before the lab."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if await placeholders_ready(fed) >= placeholders:
            return round(time.monotonic() - t0, 1), True
        await asyncio.sleep(1.0)
    return round(time.monotonic() - t0, 1), False


async def kill(hub: HubProcess) -> None:
    """The hub and its proxy go at once (a graceful stop would stop hundreds of servers one by
    one): the arm's federation, with every pod, goes next."""
    await hub.kill()


def arm_order(round_: int, modes: tuple[str, ...] = ("kernel", "server")) -> list[tuple[str, bool]]:
    order = [(mode, pools) for mode, pools in [("kernel", True), ("kernel", False), ("server", False), ("server", True)] if mode in modes]
    return order if round_ % 2 == 0 else order[::-1]


def combine(arms: list[Arm]) -> dict[str, Any]:
    """Per arm over every round: the pooled quantiles, each round's p95, and the counts summed."""
    out: dict[str, Any] = {}
    for name in dict.fromkeys(a.setup.name for a in arms):
        mine = [a for a in arms if a.setup.name == name]
        rows = [a.summary() for a in mine]
        times = [s.seconds for a in mine for s in a.students if s.outcome == "ran" and s.seconds is not None]
        refused: Counter[str] = Counter()
        for r in rows:
            refused.update(r["refused_reasons"])
        out[name] = {
            "start_s": quantiles(times),
            "p95_by_round": [r["start_s"]["p95"] for r in rows],
            **{k: sum(r[k] for r in rows) for k in ("ran", "refused", "lost")},
            "refused_reasons": dict(refused.most_common(5)),
            "queue": {
                "students_queued": sum(r["queue"]["students_queued"] for r in rows),
                "max_length": max(r["queue"]["max_length"] for r in rows),
            },
            "pool_gpu_hours_held": round(sum(r["pools"]["gpu_hours_held"] for r in rows), 3),
            "double_booked_max": max(r["double_booked_max"] for r in rows),
        }
    return out


def checks(result: dict[str, Any], goal_s: float) -> dict[str, bool]:
    arms = result["arms"]
    kernel_pools = arms.get("kernel_pools", {}).get("start_s", {})
    return {
        "kernel_p95_with_pools_within_goal": kernel_pools.get("n", 0) > 0 and kernel_pools["p95"] <= goal_s,
        "nothing_double_booked": all(a["double_booked_max"] == 0 for a in arms.values()),
        "every_student_ran_or_refused_with_reason": all(a["lost"] == 0 for a in arms.values()),
        "pools_ready_before_rush": all(r["pools"]["ready_before_rush"] for r in result["rounds"]),
    }


async def run(args: argparse.Namespace, state_dir: Path) -> dict[str, Any]:
    shape = Shape.for_students(args.students)
    rng = random.Random(args.seed)
    arms: list[Arm] = []
    setups: dict[str, ArmSetup] = {}
    for round_ in range(args.rounds):
        arrivals = lab_start_arrivals(args.students, args.window, rng)
        for mode, with_pools in arm_order(round_, args.modes):
            setup = arm_setup(mode, with_pools, shape, args.pool_fraction)
            setups[setup.name] = setup
            arms.append(await run_arm(setup, round_, shape, arrivals, args, state_dir))
    result: dict[str, Any] = {
        "benchmark": "rush",
        "control_plane": args.control_plane,
        "students": args.students,
        "modes": list(args.modes),
        "window_s": args.window,
        "rounds": [a.summary() for a in arms],
        "gpus": shape.gpus,
        "pools": {name: setup.describe() for name, setup in setups.items()},  # which pools each arm had
        "scaled": SCALED,
        "pull_speedup": args.pull_speedup,
        "k8s_api_request_timeout_s": args.api_request_timeout,
        "hub_sqlite": args.hub_sqlite,
        "load_average": [round(v, 2) for v in os.getloadavg()],
    }
    result["arms"] = combine(arms)
    result["p95_goal_s"] = args.p95_goal
    result["checks"] = checks(result, args.p95_goal)
    result["ok"] = all(result["checks"].values())
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuburst bench rush", description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=500, help="students pressing Start (default 500)")
    parser.add_argument("--window", type=float, default=60.0, help="seconds within which they all press Start (default 60)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the four arms, in alternating order (default 2)")
    parser.add_argument("--pool-fraction", type=float, default=1.0, help="share of each site's GPUs the pools hold warm (default 1.0)")
    parser.add_argument("--p95-goal", type=float, default=10.0, help="kernel mode's p95 with pools, seconds (default 10)")
    parser.add_argument("--start-timeout", type=int, default=600, help="seconds a server or kernel may take to start (default 600)")
    parser.add_argument("--warm-up-timeout", type=float, default=900.0, help="seconds the pools may take to fill and pull (default 900)")
    parser.add_argument(
        "--pull-speedup",
        type=float,
        default=1.0,
        help="image pulls this many times faster than rush.yaml's (short test runs only; default 1)",
    )
    parser.add_argument(
        "--api-request-timeout",
        type=int,
        default=None,
        help="KubeSpawner's k8s_api_request_timeout, seconds (default: KubeSpawner's, 3); on a small machine "
        "the emulated API server answers hundreds of creates a minute slower than that",
    )
    parser.add_argument(
        "--hub-sqlite",
        choices=("wal", "rollback"),
        default="wal",
        help="the hub's SQLite journal: WAL, as docs/warm-pools.md prepares a hub for a lab (default), "
        "or SQLite's default rollback journal",
    )
    parser.add_argument(
        "--control-plane",
        choices=CONTROL_PLANES,
        default="emulator",
        help="'kube': every site on its own real control plane (make kube), the hub as its ServiceAccount installed as "
        "docs/install.md says, kube-scheduler placing and preempting (default: %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=1, help="arrivals' random seed")
    parser.add_argument(
        "--mode",
        dest="modes",
        choices=("kernel", "server"),
        action="append",
        default=None,
        help="run only this mode's two arms, with and without pools (repeatable; default both)",
    )
    parser.add_argument("--state-dir", type=Path, default=None, help="keep hub and pod logs here (default: a temp dir, removed)")
    parser.add_argument("--json", action="store_true", help="print one JSON object on one line")
    args = parser.parse_args(argv)
    args.modes = tuple(args.modes or ("kernel", "server"))
    if args.students < 1 or args.rounds < 1 or args.window <= 0 or not 0 < args.pool_fraction <= 1 or args.pull_speedup <= 0:
        parser.error("need --students and --rounds >= 1, --window > 0 and 0 < --pool-fraction <= 1")
    if args.control_plane == "kube":
        from jupyter_gpuburst.sim.kube import deployment

        if why := deployment.unavailable():
            parser.error(f"--control-plane kube: {why}")
    return stopping.run_and_print(lambda state_dir: run(args, state_dir), args.state_dir, "rush", args.json)
