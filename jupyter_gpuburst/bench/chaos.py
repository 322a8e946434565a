"""`gpuburst bench chaos`: N students start a GPU server while the federation misbehaves.

One local federation (origin + one donor) and a real JupyterHub running GPUBurstSpawner, twice
in one invocation, with the same arrivals (spawns spread over the run, not all at once):

1. fault-free: the reference spawn times;
2. chaos: under a :class:`~jupyter_gpuburst.sim.faults.FaultSchedule`: 429/500 bursts on the origin's
   API, watch streams dropped, the history expired (410 Gone on resumed watches), the origin's API
   server down 10 s, the donor's peering lost 10 s and back, the hub SIGKILLed and restarted twice.

``--control-plane kube`` runs the same students and checks with every site on its own real
control plane, the hub as its ServiceAccount, and real faults in place of the emulated ones
(``chaos_kube``): the origin's etcd killed for 8 s, its kube-apiserver restarted mid-spawn, the
donor's whole control plane lost with servers running there, the hub killed.

Each student behaves as one would: starts the server, and when the hub went away under them,
waits for it, looks at their server, and starts it again if it is not there (at most
``--attempts`` times). A refusal the hub answers with a message ends their attempt.

Every count comes from what exists, read after the run has settled, never from what the hub
reports about its own spawns: pods from the emulated API servers' stores (origin and donor),
servers and their saved state from the hub's database, reservations from the hub's capacity
API. ``ready``: the hub has the server ready, exactly one pod exists for it, running, on the
site the hub's saved placement names. ``refused``: the student got a short message (no API
dump), and nothing exists for them. ``lost``: neither. ``duplicated``: pods beyond one per
server (origin pods, and donor copies beyond one per origin pod). ``orphaned``: pods no server
of the hub accounts for. ``leaked_reservations``: reservations the hub still holds when no spawn
is in progress. ``wrong_placement``: servers whose saved placement is not where the pod is.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http
import json
import os
import random
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from jupyter_gpuburst.bench import chaos_kernels, chaos_kube, chaos_pools, stopping
from jupyter_gpuburst.bench.chaos_count import USER_LABEL as USER_LABEL  # the tests' name for it
from jupyter_gpuburst.bench.chaos_count import complaints_about as complaints_about
from jupyter_gpuburst.bench.chaos_count import count
from jupyter_gpuburst.bench.chaos_count import user_pods as user_pods
from jupyter_gpuburst.bench.hubproc import HubProcess
from jupyter_gpuburst.bench.kernel_client import user_tokens
from jupyter_gpuburst.bench.ledger_check import LEDGER_FILE, PodLifetimes, compare
from jupyter_gpuburst.bench.spawn import NAMESPACE, clear_pods, federation_config, hub_config, percentile
from jupyter_gpuburst.sim.faults import FaultSchedule, FaultStep
from jupyter_gpuburst.sim.federation import CONTROL_PLANES, Federation
from jupyter_gpuburst.sim.testing import running_federation

T0 = time.monotonic()
HUB_LOG_LEVEL = os.environ.get("GPUBURST_BENCH_HUB_LOG_LEVEL", "INFO")
# what must never reach a student: the kubernetes client's dump of an error
RAW_MARKERS = ("HTTP response headers", "HTTP response body", "CIMultiDict", "Traceback", "Reason: ")
CLEAR_MESSAGE_MAX = 300
# the product's defaults throughout: what is measured is what an admin gets
HUB_CONFIG_EXTRA = ""


# a bare status phrase ("Internal Server Error") tells the student nothing
GENERIC_PHRASES = frozenset(status.phrase for status in http.HTTPStatus)


def is_clear(message: str) -> bool:
    """A reason a student can read: short, no raw API response in it, more than a status phrase."""
    if not message or message.strip() in GENERIC_PHRASES or len(message) > CLEAR_MESSAGE_MAX:
        return False
    return not any(m in message for m in RAW_MARKERS)


@dataclass
class Journey:
    """One student's spawn: what they saw, from their side."""

    user: str
    outcome: str = "none"  # ready | refused | unclear | gave_up
    message: str = ""
    seconds: float | None = None
    posts: int = 0
    hub_gone: int = 0
    # (seconds since the run started, what happened): for the state dir's journeys.json
    trace: list[tuple[float, str]] = field(default_factory=list)

    def note(self, what: str) -> None:
        self.trace.append((round(time.monotonic() - T0, 2), what))


@dataclass
class Phase:
    name: str
    journeys: list[Journey] = field(default_factory=list)
    wall_s: float = 0.0
    faults_done: list[tuple[float, str]] = field(default_factory=list)
    hub_restarts: int = 0
    kube_faults: list[dict[str, Any]] = field(default_factory=list)  # what each real fault did


class Hub:
    """A HubProcess that can be killed like a crashed pod and started again on the same ports."""

    def __init__(self, workdir: Path, kubeconfig: Path, start_timeout: int, before: str = "", after: str = "") -> None:
        self.process = HubProcess(
            workdir,
            before + hub_config("gpuburst", start_timeout, HUB_CONFIG_EXTRA + after),
            env={"KUBECONFIG": str(kubeconfig)},
            log_level=HUB_LOG_LEVEL,
        )
        self.up = asyncio.Event()
        self.restarts = 0
        self.preempt_waits: list[float] = []  # each pools_preempted's wait for a restarted hub
        self.restarting = asyncio.Lock()  # held by a kill and restart, and by pools_preempted

    async def start(self) -> None:
        await self.process.start(timeout=120)
        self.up.set()

    async def kill_and_restart(self) -> None:
        """SIGKILL a hub that is up (a restart still under way is waited for first)."""
        async with self.restarting:
            await self.up.wait()
            await self._kill_and_restart()

    async def _kill_and_restart(self) -> None:
        self.up.clear()
        await self.process.kill()  # the hub and its proxy, no cleanup
        await asyncio.sleep(1.0)
        await self.start()
        self.restarts += 1

    async def stop(self) -> None:
        self.up.clear()
        await self.process.stop(timeout=60)


async def _request(hub: Hub, session: aiohttp.ClientSession, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
    return await hub.process.request(session, method, path, **kwargs)


async def _wait_hub(hub: Hub, deadline: float) -> None:
    while not hub.up.is_set():
        if time.monotonic() > deadline:
            raise TimeoutError("the hub did not come back")
        await asyncio.sleep(0.2)


def _message(body: Any) -> str:
    if isinstance(body, dict):
        return str(body.get("message") or "")
    return str(body or "")


async def journey(hub: Hub, session: aiohttp.ClientSession, user: str, attempts: int, deadline: float, profile: str = "gpu1") -> Journey:
    """Start ``user``'s server as a student would, through hub deaths; see the module doc."""
    out = Journey(user)
    started = time.monotonic()
    while time.monotonic() < deadline:
        await _wait_hub(hub, deadline)
        if out.posts >= attempts:
            out.outcome = "gave_up"
            return out
        out.posts += 1
        out.note("POST")
        try:
            status, body = await _request(hub, session, "POST", f"/users/{user}/server", json={"profile": profile})
            out.note(f"HTTP {status}")
        except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError) as exc:
            out.note(f"hub gone: {type(exc).__name__}")
            out.hub_gone += 1
            status, body = await _after_hub_loss(hub, session, user, deadline)
            if status == "ready":
                out.outcome, out.seconds = "ready", time.monotonic() - started
                return out
            continue  # no server: start it again
        if status == 201:
            out.outcome, out.seconds = "ready", time.monotonic() - started
            return out
        if status == 202 or (status == 400 and "is pending" in _message(body)):
            state = await _wait_not_pending(hub, session, user, deadline)
            if state == "ready":
                out.outcome, out.seconds = "ready", time.monotonic() - started
                return out
            continue
        if status == 400 and "already running" in _message(body):
            out.outcome, out.seconds = "ready", time.monotonic() - started
            return out
        if status in (502, 503, 504) and not hub.up.is_set():
            continue  # the proxy or hub died mid-answer
        out.message = _message(body)
        out.outcome = "refused" if is_clear(out.message) else "unclear"
        return out
    out.outcome = "gave_up"
    return out


async def _server_state(hub: Hub, session: aiohttp.ClientSession, user: str) -> str:
    """ready | pending | none, from the hub's user model."""
    status, model = await _request(hub, session, "GET", f"/users/{user}")
    if status != 200 or not isinstance(model, dict):
        raise aiohttp.ClientError(f"GET /users/{user}: HTTP {status}")
    server = (model.get("servers") or {}).get("")
    if not server:
        return "none"
    if server.get("ready"):
        return "ready"
    return "pending" if server.get("pending") else "none"


async def _wait_not_pending(hub: Hub, session: aiohttp.ClientSession, user: str, deadline: float) -> str:
    while time.monotonic() < deadline:
        try:
            await _wait_hub(hub, deadline)
            state = await _server_state(hub, session, user)
        except (aiohttp.ClientError, asyncio.TimeoutError, ConnectionError):
            await asyncio.sleep(0.5)
            continue
        if state != "pending":
            return state
        await asyncio.sleep(0.5)
    return "none"


async def _after_hub_loss(hub: Hub, session: aiohttp.ClientSession, user: str, deadline: float) -> tuple[str, Any]:
    """The hub went away mid-request: once it is back, what became of the server?"""
    await asyncio.sleep(0.5)
    return await _wait_not_pending(hub, session, user, deadline), None


# ---- the run -----------------------------------------------------------------------------------


def chaos_actions(
    fed: Federation, hub: Hub, kube_notes: list[dict[str, Any]], kernels: Callable[[], Collection[str]] | None = None
) -> dict[str, Any]:
    async def hub_kill(step: FaultStep) -> None:
        await hub.kill_and_restart()

    async def pools_preempted(step: FaultStep) -> None:
        hub.preempt_waits.append(await chaos_pools.preempt_once_watched(fed, hub))

    if fed.control_plane == "kube":
        return {**chaos_kube.actions(fed, kube_notes, kernels), "hub_kill": hub_kill, "pools_preempted": pools_preempted}
    faults = fed.origin.api.faults

    async def errors(step: FaultStep) -> None:
        faults.error_rate_429 = float(step.params.get("rate_429", 0.0))
        faults.error_rate_500 = float(step.params.get("rate_500", 0.0))
        try:
            await asyncio.sleep(step.duration_s)
        finally:
            faults.error_rate_429 = faults.error_rate_500 = 0.0

    async def watch_gone(step: FaultStep) -> None:
        faults.expire_history(fed.origin.store.resource_version)
        fed.origin.api.drop_watches()

    async def watch_drop(step: FaultStep) -> None:
        fed.origin.api.drop_watches()

    async def api_down(step: FaultStep) -> None:
        await fed.origin.api.stop()
        try:
            await asyncio.sleep(step.duration_s)
        finally:
            await fed.origin.api.start()

    async def peering_lost(step: FaultStep) -> None:
        donor = str(step.params.get("donor") or next(iter(fed.donors)))
        await fed.donor_outage(donor, True)
        try:
            await asyncio.sleep(step.duration_s)
        finally:
            await fed.donor_outage(donor, False)

    return {
        "errors": errors,
        "watch_gone": watch_gone,
        "watch_drop": watch_drop,
        "api_down": api_down,
        "peering_lost": peering_lost,
        "hub_kill": hub_kill,
        "pools_preempted": pools_preempted,
    }


async def run_phase(
    fed: Federation,
    workdir: Path,
    kubeconfig: Path,
    name: str,
    users: list[str],
    arrivals: list[float],
    schedule: FaultSchedule | None,
    args: argparse.Namespace,
    pools: list[dict[str, Any]],
    kernel_students: Sequence[tuple[str, float]] = (),  # (user, arrival) of each kernel student
) -> tuple[Phase, dict[str, Any]]:
    phase = Phase(name)
    donor_id = next(iter(fed.donors))
    # every GPU pod's real life, from the origin's store: what the hub's ledger must match (a
    # donor's GPU kernels run in a namespace of their own)
    lifetimes = PodLifetimes(fed.origin.store, NAMESPACE, *([chaos_kernels.donor_namespace(donor_id)] if kernel_students else []))
    lifetimes.start()
    kernel_users = [user for user, _ in kernel_students]
    hub = Hub(
        workdir,
        kubeconfig,
        args.start_timeout,
        chaos_pools.config_lines(pools),
        chaos_kernels.config_lines(kernel_users, donor_id, args.start_timeout),
    )
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=args.start_timeout + 60)
    faults_task: asyncio.Task | None = None
    try:
        await hub.start()
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
            status, body = await _request(hub, session, "POST", "/users", json={"usernames": users + kernel_users})
            if status != 201:
                raise RuntimeError(f"could not create users: HTTP {status}: {body}")
            tokens = await user_tokens(hub.process, session, kernel_users, "bench chaos") if kernel_users else {}
            deadline = time.monotonic() + max([*arrivals, *(at for _, at in kernel_students)]) + args.start_timeout * args.attempts

            rng = random.Random(args.seed)

            async def one(index: int, user: str, at: float) -> Journey:
                await asyncio.sleep(at)
                if pools and schedule is not None and chaos_pools.cancels(index):
                    # pressed Cancel while the hub places the server (or its pod starts)
                    return await chaos_pools.cancel_while_placed(hub, session, user, Journey(user), rng.uniform(0.3, 3.0), deadline)
                return await journey(hub, session, user, args.attempts, deadline)

            kernels = [chaos_kernels.KernelStart(user) for user in kernel_users]

            async def with_kernel(k: chaos_kernels.KernelStart, at: float) -> Journey:
                await asyncio.sleep(at)
                server = await journey(hub, session, k.user, args.attempts, deadline, profile=chaos_kernels.CPU_SERVER)
                if server.outcome == "ready":
                    await chaos_kernels.start_kernel(hub, session, fed, k, tokens[k.user], args.attempts, deadline)
                else:
                    k.outcome, k.message = "lost", f"no server: {server.outcome} {server.message}".strip()
                return server

            started = time.monotonic()
            faults_task = (
                asyncio.create_task(
                    schedule.run(chaos_actions(fed, hub, phase.kube_faults, (lambda: chaos_kernels.working(kernels)) if kernels else None))
                )
                if schedule
                else None
            )
            phase.journeys = list(
                await asyncio.gather(
                    *(one(i, u, t) for i, (u, t) in enumerate(zip(users, arrivals, strict=True))),
                    *(with_kernel(k, at) for k, (_, at) in zip(kernels, kernel_students, strict=True)),
                )
            )
            if faults_task is not None:
                await faults_task  # every fault has ended and the hub is back before counting
                phase.faults_done = list(schedule.done)
            phase.wall_s = time.monotonic() - started
            phase.hub_restarts = hub.restarts
            await _wait_hub(hub, time.monotonic() + 120)
            counts = await count(fed, hub, session, phase.journeys, pools)
            counts["kernels"] = await chaos_kernels.count(hub, session, fed, kernels, tokens, is_clear)
            counts["ledger"] = compare(lifetimes, workdir / LEDGER_FILE)
            counts["placeholders_bound"] = chaos_pools.placeholders_bound(lifetimes.pods.values())
            counts["pools_preempted_waited_s"] = [round(w, 2) for w in hub.preempt_waits]
            trace = [{"user": j.user, "outcome": j.outcome, "message": j.message[:300], "trace": j.trace} for j in phase.journeys]
            kernel_trace = [{"user": k.user, "outcome": k.outcome, "message": k.message[:300], "trace": k.trace} for k in kernels]
            (workdir / "journeys.json").write_text(
                json.dumps({"faults": phase.faults_done, "journeys": trace, "kernels": kernel_trace}, indent=1)
            )
    finally:
        # the faults first: one still running would restart a hub or an API server after this stopped
        if faults_task is not None:
            faults_task.cancel()
            with contextlib.suppress(BaseException):
                await faults_task
        await lifetimes.stop()
        await hub.stop()
        await clear_pods(fed, timeout=60)
    return phase, counts


def checks(counts: dict[str, Any], requested: int) -> dict[str, bool]:
    """Pass/fail over the counts read after the chaos phase settled."""
    kernels = counts.get("kernels") or {}
    return {
        "none_lost": counts["lost"] == 0,
        "none_duplicated": counts["duplicated"] == 0,
        "none_orphaned": counts["orphaned"] == 0,
        "no_leaked_reservation": counts["leaked_reservations"] == 0,
        # placeholders beyond their pool's size (those of no configured pool count as orphaned)
        "no_leaked_placeholder": counts.get("leaked_placeholders", 0) == 0,
        "none_on_a_site_its_placement_does_not_name": counts["wrong_placement"] == 0,
        # a student who pressed Cancel must be left with nothing, which ``count`` checked
        "every_student_ready_or_refused": counts["ready"] + counts["refused"] + counts.get("cancelled", 0) == requested,
        # GPU-hours: each pod's GPU-seconds in the hub's ledger within ledger_check.TOLERANCE_S of its real life
        "ledger_matches_pod_lifetimes": counts["ledger"]["off_by_more"] == 0 and counts["ledger"]["pods"] > 0,
        # the kernel students' GPU kernels (chaos_kernels): each that ran still runs where it ran
        "no_gpu_kernel_lost": kernels.get("lost", 0) == 0,
        "no_gpu_kernel_duplicated_or_orphaned": kernels.get("duplicated", 0) == 0 and kernels.get("orphaned", 0) == 0,
        "every_kernel_student_ran_or_refused": kernels.get("ran", 0) + kernels.get("refused", 0) == kernels.get("students", 0),
    }


async def run(args: argparse.Namespace, state_dir: Path) -> dict[str, Any]:
    n = args.spawns
    control_plane = getattr(args, "control_plane", "emulator")
    kube = control_plane == "kube"
    kubeconfig = state_dir / "kubeconfig"
    local = args.local_gpus if args.local_gpus is not None else max(1, n // 4)
    k = getattr(args, "kernel_students", 0)
    # room on the donor for every kernel student's GPU kernel (allowed there only) beside the servers
    donor = args.donor_gpus if args.donor_gpus is not None else n - local + max(2, n // 10) + k
    config = federation_config(local, donor, n)
    span = args.span if args.span is not None else max(45.0, n * 0.6)
    rng = random.Random(args.seed)
    arrivals = sorted(rng.uniform(0, span * 0.8) for _ in range(n))
    pools = chaos_pools.pools_for(local, donor) if args.pools else []
    # kernel students come early, so that their kernels run before the donor goes and through
    # most faults (drawn apart from the others', whose arrivals stay those of a run without them)
    kernel_rng = random.Random(args.seed + 1)
    kernel_arrivals = sorted(kernel_rng.uniform(0, span * 0.2) for _ in range(k))
    async with running_federation(config, state_dir=state_dir / "sim", kubeconfig=kubeconfig, control_plane=control_plane) as fed:
        chaos_pools.prepare_donors(fed)
        if kube:  # the hub as its ServiceAccount, never with the federation's admin certificate
            kubeconfig = chaos_kube.hub_kubeconfig(fed, state_dir / "hub-account")

        def phase(name: str, prefix: str, schedule: FaultSchedule | None) -> Any:
            servers = [f"{prefix}{i:03d}" for i in range(n)]
            kernel_students = [(f"{prefix}k{i:02d}", at) for i, at in enumerate(kernel_arrivals)]
            return run_phase(fed, state_dir / f"hub-{name}", kubeconfig, name, servers, arrivals, schedule, args, pools, kernel_students)

        base, base_counts = await phase("fault-free", "calm", None)
        donor_id = next(iter(fed.donors))
        schedule = FaultSchedule.kube_chaos(span, donor_id) if kube else FaultSchedule.chaos(span, donor=donor_id)
        if pools:
            schedule = chaos_pools.with_pool_faults(schedule, span)
        chaos, counts = await phase("chaos", "storm", schedule)
    times = [j.seconds for j in chaos.journeys if j.outcome == "ready" and j.seconds is not None]
    base_times = [j.seconds for j in base.journeys if j.outcome == "ready" and j.seconds is not None]
    passed = checks(counts, n + k)  # a kernel student's CPU server is a server like the others
    return {
        "benchmark": "chaos",
        "control_plane": control_plane,
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "requested": n,
        "kernel_students": k,
        "local_gpus": local,
        "donor_gpus": donor,
        "pools": pools,
        **counts,
        "checks": passed,
        "ok": all(passed.values()),
        "p50_spawn_s": round(percentile(times, 50), 3),
        "p95_spawn_s": round(percentile(times, 95), 3),
        "fault_free_ready": base_counts["ready"],
        "fault_free_p95_spawn_s": round(percentile(base_times, 95), 3),
        "fault_free_refused": base_counts["refused"],
        "fault_free_cancelled": base_counts["cancelled"],
        "fault_free_leaked_placeholders": base_counts["leaked_placeholders"],
        "fault_free_placeholders_bound": base_counts["placeholders_bound"],
        "fault_free_lost": base_counts["lost"],
        "fault_free_orphaned": base_counts["orphaned"],
        "fault_free_duplicated": base_counts["duplicated"],
        "fault_free_ledger": base_counts["ledger"],
        "fault_free_kernels": base_counts["kernels"],
        "hub_restarts": chaos.hub_restarts,
        "faults": [f"{t:.0f}s {kind}" for t, kind in chaos.faults_done],
        **({"kube_faults": chaos.kube_faults} if kube else {}),
        "spawn_requests": sum(j.posts for j in chaos.journeys),
        "spawns_cut_by_hub_kill": sum(1 for j in chaos.journeys if j.hub_gone),
        "wall_s": round(chaos.wall_s, 1),
        "fault_free_wall_s": round(base.wall_s, 1),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuburst bench chaos", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--spawns", type=int, default=None, help="students starting a 1-GPU server (default 200; 12 on the real control plane)"
    )
    parser.add_argument("--local-gpus", type=int, default=None, help="GPUs on the origin (default: a quarter of --spawns)")
    parser.add_argument("--donor-gpus", type=int, default=None, help="GPUs the donor grants (default: the rest and a tenth more)")
    parser.add_argument("--span", type=float, default=None, help="seconds arrivals and faults span (default: 0.6 s a spawn, at least 45)")
    parser.add_argument("--attempts", type=int, default=4, help="times a student starts the server again after losing the hub (default 4)")
    parser.add_argument("--start-timeout", type=int, default=180, help="seconds one spawn may take before the hub gives up")
    parser.add_argument(
        "--kernel-students",
        type=int,
        default=2,
        help="students with a CPU server and a GPU kernel on the donor, besides --spawns (default %(default)s)",
    )
    parser.add_argument("--seed", type=int, default=1, help="arrival times' random seed")
    parser.add_argument(
        "--no-pools", dest="pools", action="store_false", help="without warm pools (default: on, with their faults, cancels)"
    )
    parser.add_argument(
        "--control-plane",
        choices=CONTROL_PLANES,
        default="emulator",
        help="'kube': every site on its own real control plane (make kube), the hub as its ServiceAccount, and the faults "
        "are its processes': etcd killed 8 s, kube-apiserver restarted, the donor's control plane lost (default: %(default)s)",
    )
    parser.add_argument("--state-dir", type=Path, default=None, help="keep hub logs and pod logs here (default: a temp dir, removed)")
    parser.add_argument("--json", action="store_true", help="print one JSON object on one line")
    args = parser.parse_args(argv)
    if args.spawns is None:
        args.spawns = 12 if args.control_plane == "kube" else 200
    if args.spawns < 1:
        parser.error("--spawns must be at least 1")
    if args.attempts < 1:
        parser.error("--attempts must be at least 1")
    if args.kernel_students < 0:
        parser.error("--kernel-students must be 0 or more")
    if args.control_plane == "kube" and (why := chaos_kube.unavailable()):
        parser.exit(2, f"gpuburst bench chaos: {why}\n")
    return stopping.run_and_print(lambda state_dir: run(args, state_dir), args.state_dir, "chaos", args.json)
