"""`gpuburst bench trace`: a semester of a GPU course replayed through the real placement engine.

The trace (``bench/trace_model.py``: arrivals by weekday and hour, lab sections, session
lengths, profile mix, busy periods within sessions) is replayed as a discrete-event simulation
against ``core.inventory.Inventory`` (synthetic nodes: origin GPU nodes and one Liqo virtual
node per donor, fed as watch events) and ``core.placement`` (``Placer`` / ``decide``), for
four policies:

- ``local-only``: the origin alone (``Strategy.LOCAL_ONLY``);
- ``local-first``: burst to donors when the origin is full (``Strategy.LOCAL_FIRST``);
- ``donor-first``: donors before the origin (``Strategy.DONOR_FIRST``);
- ``loss``: every site competes on the loss ``latency + idle GPU memory`` alone. core.placement
  ranks sites inside a strategy's tiers; here each site's best node comes from ``decide`` with
  the request limited to that site, and the lowest loss wins.

A request that finds no room waits in a first-come-first-served queue, as GPUBurstSpawner's
queue does (a new request first tries to place directly; only the head of the queue is retried
when capacity frees), for at most ``start_timeout`` (300 s, z2jh's default); then it is
refused. A placed request's pod is bound at once and fed back to the inventory, which releases
the reservation, as in the hub.

How sessions hold GPUs is a *mode* (``MODES``): ``server`` holds the session's GPUs from start to
end; ``server-culled`` the same until the product's GPU idle culler stops the server
(``bench/trace_culling.py``); ``kernel`` holds them only while a GPU kernel lives: from a busy
moment until the culler stops it for idleness (the product's rule, ``--kernel-cull-timeout``),
busy periods closer than that sharing one kernel. Each mode turns a session into GPU *demands*;
the simulator does not know the difference. ``--cull-timeout`` adds the culled server mode and
a ``culling`` summary: GPU-hours held idle given back, and sessions culled while the student was
still working (a busy period after the stop).

Prints JSON; ``--plots DIR`` writes the PNG plots (matplotlib, the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from jupyter_gpuburst.bench import synthetic
from jupyter_gpuburst.bench.stats import percentile, summary
from jupyter_gpuburst.bench.trace_culling import CullRule, culling_summary, server_stop, with_open_tabs
from jupyter_gpuburst.bench.trace_model import HOUR, WEEK, Session, TraceParams, generate
from jupyter_gpuburst.bench.trace_pools import PoolPlan, pool_cost
from jupyter_gpuburst.core import keys
from jupyter_gpuburst.core.inventory import Inventory, Snapshot
from jupyter_gpuburst.core.placement import (
    GPURequest,
    NoCapacity,
    Placement,
    Placer,
    Policy,
    Strategy,
    decide,
)
from jupyter_gpuburst.hub.culling.settings import GPUCullingSettings

GPU = "nvidia.com/gpu"
ORIGIN = keys.ORIGIN_SITE
POLICIES = ("local-only", "local-first", "donor-first", "loss")
GPUS_PER_LOCAL_NODE = 4
# the loss's latency term for a donor, in GiB of idle GPU memory: one stranded 40 GiB GPU
DEFAULT_DONOR_LATENCY = 40.0


# ---- modes: how a session turns into GPU demands ---------------------------------------------
@dataclass(frozen=True)
class Demand:
    """GPUs wanted from ``start`` for ``hold`` seconds, of which ``active`` compute."""

    did: int
    session: Session
    start: float
    hold: float
    active: float


class Mode(Protocol):
    name: str

    def demands(self, session: Session, first_id: int) -> list[Demand]: ...


@dataclass(frozen=True)
class ServerMode:
    """The session's server holds its GPUs for the whole session (what a GPU profile does today)."""

    name: str = "server"

    def demands(self, session: Session, first_id: int) -> list[Demand]:
        active = sum(b for _, b in session.busy)
        return [Demand(first_id, session, session.start, session.length, active)]


@dataclass(frozen=True)
class CulledServerMode:
    """The server holds its GPUs until the session ends or the GPU idle culler stops it."""

    rule: CullRule
    name: str = "server-culled"

    def demands(self, session: Session, first_id: int) -> list[Demand]:
        stop = server_stop(session, self.rule)
        end = session.start + session.length if stop is None else stop
        active = sum(min(b, max(0.0, end - session.start - o)) for o, b in session.busy)
        return [Demand(first_id, session, session.start, end - session.start, active)]


@dataclass(frozen=True)
class KernelMode:
    """Only a living GPU kernel holds GPUs: from a busy moment until it is let go, ``release_s``
    after its last busy moment, or where ``rule`` is given, when the product's culler stops it."""

    name: str = "kernel"
    release_s: float = 120.0
    rule: CullRule | None = None

    def released(self, last_busy: float) -> float:
        return self.rule.stop_at(last_busy) if self.rule is not None else last_busy + self.release_s

    def demands(self, session: Session, first_id: int) -> list[Demand]:
        spans: list[list[float]] = []  # [start, end, active] merged while the kernel still lives
        for offset, length in session.busy:
            s, e = session.start + offset, session.start + offset + length
            if spans and s < self.released(spans[-1][1]):
                spans[-1][1] = e
                spans[-1][2] += length
            else:
                spans.append([s, e, length])
        end_of_session = session.start + session.length
        return [
            Demand(first_id + i, session, s, min(self.released(e), end_of_session) - s, active) for i, (s, e, active) in enumerate(spans)
        ]


# the product's GPU kernel culling: a kernel profile's timeout in the worked example
# (hub_config/culling_config.py), swept every GPUCullingSettings.period_seconds
DEFAULT_KERNEL_CULL_TIMEOUT = 1200.0


def mode_factories(
    kernel_cull_timeout: float = DEFAULT_KERNEL_CULL_TIMEOUT, cull_timeout: float | None = None
) -> dict[str, Callable[[], Mode]]:
    out: dict[str, Callable[[], Mode]] = {
        "server": ServerMode,
        "kernel": lambda: KernelMode(rule=CullRule.product_default(kernel_cull_timeout)),
    }
    if cull_timeout is not None:
        out["server-culled"] = lambda: CulledServerMode(CullRule.product_default(cull_timeout))
    return out


MODES: dict[str, Callable[[], Mode]] = mode_factories(cull_timeout=GPUCullingSettings().timeout_seconds)


# ---- the federation ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Federation:
    local_gpus: int = 16
    donor_gpus: tuple[tuple[str, int], ...] = (("donor-a", 32), ("donor-b", 32))

    def nodes(self) -> list[dict[str, Any]]:
        out = []
        full, rest = divmod(self.local_gpus, GPUS_PER_LOCAL_NODE)
        for i in range(full):
            out.append(synthetic.node(f"origin-gpu-{i}", {GPU: GPUS_PER_LOCAL_NODE}))
        if rest:
            out.append(synthetic.node("origin-gpu-small", {GPU: rest}))
        for donor, gpus in self.donor_gpus:
            # one virtual node per donor, allocatable = the grant (as Liqo's virtual kubelet shows it)
            out.append(synthetic.node(f"liqo-{donor}", {GPU: gpus}, cluster_id=donor))
        return out

    @property
    def donors(self) -> list[str]:
        return [d for d, _ in self.donor_gpus]


def policy_for(name: str, gpu_memory_gib: float, donor_latency: float) -> Policy:
    strategy = {
        "local-only": Strategy.LOCAL_ONLY,
        "local-first": Strategy.LOCAL_FIRST,
        "donor-first": Strategy.DONOR_FIRST,
        "loss": Strategy.LOCAL_FIRST,  # each site is asked alone: the strategy's tiers do not matter
    }[name]
    return Policy(strategy=strategy, donor_latency_penalty=donor_latency, idle_memory_weight=1.0, resource_memory_gib={GPU: gpu_memory_gib})


# ---- the simulation ---------------------------------------------------------------------------
class HourSeries:
    """A piecewise-constant quantity integrated into hourly bins (value-hours per hour)."""

    def __init__(self, hours: int) -> None:
        self.bins = [0.0] * hours
        self.value = 0.0
        self.last = 0.0

    def set(self, now: float, value: float) -> None:
        self.advance(now)
        self.value = value

    def advance(self, now: float) -> None:
        t, v = self.last, self.value
        if v:
            while t < now:
                h = int(t // HOUR)
                end = min(now, (h + 1) * HOUR)
                if h < len(self.bins):
                    self.bins[h] += v * (end - t) / HOUR
                t = end
        self.last = max(self.last, now)


@dataclass
class Outcome:
    mode: str
    policy: str
    waits: list[float] = field(default_factory=list)
    refused: int = 0
    refused_in_labs: int = 0
    requests: int = 0
    held_gpu_s: float = 0.0
    active_gpu_s: float = 0.0
    borrowed_gpu_s: dict[str, float] = field(default_factory=dict)
    overcommitted: int = 0
    decision_s: list[float] = field(default_factory=list)


class Simulation:
    def __init__(
        self, federation: Federation, policy_name: str, mode: Mode, params: TraceParams, donor_latency: float = DEFAULT_DONOR_LATENCY
    ) -> None:
        self.federation = federation
        self.policy_name = policy_name
        self.mode = mode
        self.params = params
        self.policy = policy_for(policy_name, params.gpu_memory_gib, donor_latency)
        self.inventory = Inventory()
        for node in federation.nodes():
            self.inventory.apply_node_event("ADDED", node)
        self.placer = Placer(self.policy, self.inventory)
        self.sites = [ORIGIN, *federation.donors]
        hours = int(params.weeks * WEEK // HOUR) + 24 * 7
        self.in_use = {site: HourSeries(hours) for site in self.sites}
        self.idle_memory = HourSeries(hours)
        self.out = Outcome(mode=mode.name, policy=policy_name)

    # -- placement through the real engine
    def decide(self, key: str, demand: Demand, now: float) -> Placement | NoCapacity:
        s = demand.session
        request = GPURequest(resource=GPU, count=s.gpus, user=s.user, profile=f"gpu{s.gpus}")
        snapshot = self.inventory.snapshot()
        t0 = time.perf_counter()
        if self.policy_name == "loss":
            outcome = self._by_loss(key, request, snapshot, now)
        else:
            outcome = self.placer.place(key, request, now)
        self.out.decision_s.append(time.perf_counter() - t0)
        return outcome

    def _by_loss(self, key: str, request: GPURequest, snapshot: Snapshot, now: float) -> Placement | NoCapacity:
        best: Placement | None = None
        for site in self.sites:
            outcome = decide(replace(request, allowed_sites=(site,)), snapshot, self.policy)
            if isinstance(outcome, Placement) and (best is None or (outcome.loss, outcome.site) < (best.loss, best.site)):
                best = outcome
        if best is None:
            return NoCapacity("no site has room")
        self.placer.reservations.reserve(key, best, request, now)
        return best

    def run(self, sessions: list[Session]) -> Outcome:
        demands: list[Demand] = []
        for s in sessions:
            demands.extend(self.mode.demands(s, len(demands)))
        events: list[tuple[float, int, str, int]] = []
        for d in demands:
            heapq.heappush(events, (d.start, 1, "arrive", d.did))
        queue: deque[int] = deque()
        queued: set[int] = set()
        running: dict[int, tuple[dict, Placement]] = {}
        by_id = {d.did: d for d in demands}
        self.out.requests = len(demands)
        idle_mem = 0.0

        def start(d: Demand, placement: Placement, now: float) -> None:
            nonlocal idle_mem
            key = f"d{d.did}"
            # the pod is bound: the inventory counts it instead of the spawn's hold
            self.placer.release(key)
            bound_to = placement.held_node or placement.node
            node = self.inventory.snapshot().nodes.get(bound_to or "")
            if node is None or node.free(GPU) < d.session.gpus:
                self.out.overcommitted += 1
            pod = synthetic.pod(key, node_name=bound_to, gpus={GPU: d.session.gpus}, site=placement.site, user=d.session.user)
            self.inventory.apply_pod_event("ADDED", pod)
            running[d.did] = (pod, placement)
            self.out.waits.append(now - d.start)
            self.out.held_gpu_s += d.hold * d.session.gpus
            self.out.active_gpu_s += d.active * d.session.gpus
            if placement.site != ORIGIN:
                self.out.borrowed_gpu_s[placement.site] = self.out.borrowed_gpu_s.get(placement.site, 0.0) + d.hold * d.session.gpus
            series = self.in_use[placement.site]
            series.set(now, series.value + d.session.gpus)
            idle_mem += self._idle_memory(d)
            self.idle_memory.set(now, idle_mem)
            heapq.heappush(events, (now + d.hold, 0, "depart", d.did))

        def try_queue(now: float) -> None:
            while queue:
                did = queue[0]
                outcome = self.decide(f"d{did}", by_id[did], now)
                if not isinstance(outcome, Placement):
                    return
                queue.popleft()
                queued.discard(did)
                start(by_id[did], outcome, now)

        while events:
            now, _, kind, did = heapq.heappop(events)
            d = by_id[did]
            if kind == "arrive":
                outcome = self.decide(f"d{did}", d, now)
                if isinstance(outcome, Placement):
                    start(d, outcome, now)
                else:
                    queue.append(did)
                    queued.add(did)
                    heapq.heappush(events, (now + self.params.start_timeout_s, 2, "timeout", did))
            elif kind == "depart":
                pod, placement = running.pop(did)
                self.inventory.apply_pod_event("DELETED", pod)
                series = self.in_use[placement.site]
                series.set(now, series.value - d.session.gpus)
                idle_mem -= self._idle_memory(d)
                self.idle_memory.set(now, idle_mem)
                try_queue(now)
            elif kind == "timeout" and did in queued:
                queue.remove(did)
                queued.discard(did)
                self.out.refused += 1
                self.out.refused_in_labs += d.session.lab
                self.out.waits.append(self.params.start_timeout_s)
                try_queue(now)
        end = max((s.start + s.length for s in sessions), default=0.0)
        for series in (*self.in_use.values(), self.idle_memory):
            series.advance(end)
        return self.out

    def _idle_memory(self, d: Demand) -> float:
        """GPU memory held but unused by the demand: its GPUs' memory less what the session uses."""
        return max(0.0, d.session.gpus * self.params.gpu_memory_gib - d.session.memory_used_gib)


# ---- the study ------------------------------------------------------------------------------
def run_study(
    params: TraceParams,
    federation: Federation,
    modes: list[str],
    policies: list[str],
    donor_latency: float = DEFAULT_DONOR_LATENCY,
    *,
    cull_timeout: float | None = None,
    kernel_cull_timeout: float = DEFAULT_KERNEL_CULL_TIMEOUT,
    open_tab_share: float = 0.0,
    pool: PoolPlan | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the JSON result, the hourly series for the plots); ``pool``: warm pools around each lab's
    start, whose cost is added (``bench/trace_pools.py``)."""
    sessions = with_open_tabs(generate(params), params, open_tab_share)
    factories = mode_factories(kernel_cull_timeout, cull_timeout)
    results: dict[str, Any] = {}
    series: dict[str, Any] = {}
    for mode_name in modes:
        for policy in policies:
            sim = Simulation(federation, policy, factories[mode_name](), params, donor_latency)
            out = sim.run(sessions)
            label = f"{mode_name}/{policy}"
            results[label] = _summarise(out, federation)
            series[label] = {
                "in_use": {site: s.bins for site, s in sim.in_use.items()},
                "idle_memory_gib": sim.idle_memory.bins,
                "waits": out.waits,
            }
    result = {
        "benchmark": "trace",
        "params": _params_json(params),
        "federation": {"local_gpus": federation.local_gpus, "donors": dict(federation.donor_gpus)},
        "sessions": len(sessions),
        "lab_sessions": sum(1 for s in sessions if s.lab),
        "results": results,
        "kernel_cull_timeout_s": kernel_cull_timeout,
        "open_tab_share": open_tab_share,
        # the study is simulated time, but a reader comparing runs should see the machine's state
        "load_average": [round(v, 2) for v in os.getloadavg()],
    }
    if cull_timeout is not None:
        result["culling"] = culling_summary(sessions, CullRule.product_default(cull_timeout))
    if pool is not None and pool.gpus > 0:
        cost = pool_cost(sessions, params, pool)
        # beside what the students' own sessions hold (the product's default: local-first)
        students = (results.get("server/local-first") or next(iter(results.values()), {})).get("gpu_hours_held") or 0
        cost["share_of_student_gpu_hours"] = round(cost["gpu_hours_held"] / students, 4) if students else None
        result["pools"] = cost
    result["checks"] = checks(result)
    result["ok"] = all(result["checks"].values())
    return result, series


def _summarise(out: Outcome, federation: Federation) -> dict[str, Any]:
    placed = len(out.waits) - out.refused
    hours = 3600.0
    return {
        "requests": out.requests,
        "placed": placed,
        "refused": out.refused,
        "refused_in_labs": out.refused_in_labs,
        "wait_s": {
            **summary(out.waits, digits=1),
            "p95": round(percentile(out.waits, 95) or 0.0, 1),
            "waited_share": round(sum(1 for w in out.waits if w > 0) / max(1, len(out.waits)), 4),
        },
        "gpu_hours_held": round(out.held_gpu_s / hours, 1),
        "gpu_hours_active": round(out.active_gpu_s / hours, 1),
        "held_per_active_gpu_hour": round(out.held_gpu_s / out.active_gpu_s, 3) if out.active_gpu_s else None,
        "gpu_hours_borrowed": {d: round(out.borrowed_gpu_s.get(d, 0.0) / hours, 1) for d in federation.donors},
        "overcommitted": out.overcommitted,
        "decision_ms": summary(out.decision_s, scale=1000),
    }


def _params_json(p: TraceParams) -> dict[str, Any]:
    return asdict(p)


def checks(result: dict[str, Any]) -> dict[str, bool]:
    """Pass/fail over the study's JSON; each is False when its condition is violated."""
    out: dict[str, bool] = {}
    res = result["results"]
    out["no_overcommit"] = all(r["overcommitted"] == 0 for r in res.values())
    for mode in sorted({k.split("/")[0] for k in res}):
        local, burst = res.get(f"{mode}/local-only"), res.get(f"{mode}/local-first")
        if local is None or burst is None:
            continue
        # "cuts p95 wait at least 10x": burst's p95 times 10 is at most local-only's p95
        out[f"{mode}_burst_cuts_p95_wait_10x"] = burst["wait_s"]["p95"] * 10 <= local["wait_s"]["p95"] and local["wait_s"]["p95"] > 0
        out[f"{mode}_burst_refuses_none"] = burst["refused"] == 0
    culling = result.get("culling")
    if culling is not None:
        # the goal: half the GPU-hours held idle given back, at most 1 % of sessions culled at work
        out["culling_gives_back_half_the_idle"] = culling["idle_given_back_share"] >= 0.5
        out["culling_while_working_at_most_1pct"] = culling["culled_while_working_share"] <= 0.01
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuburst bench trace", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    d = TraceParams()
    parser.add_argument("--students", type=int, default=d.students, help=f"students in the course (default {d.students})")
    parser.add_argument("--weeks", type=int, default=d.weeks, help=f"teaching weeks (default {d.weeks})")
    parser.add_argument("--seed", type=int, default=d.seed, help=f"random seed; same seed, same trace (default {d.seed})")
    parser.add_argument("--local-gpus", type=int, default=16, help="GPUs on the origin, 4 per node (default 16)")
    parser.add_argument("--donor-gpus", type=int, default=64, help="GPUs granted by donors in all (default 64)")
    parser.add_argument("--donors", type=int, default=2, help="donor clusters sharing --donor-gpus (default 2)")
    parser.add_argument(
        "--donor-latency",
        type=float,
        default=DEFAULT_DONOR_LATENCY,
        help="the loss's latency term for a donor, in GiB of idle memory (default 40)",
    )
    parser.add_argument("--start-timeout", type=float, default=d.start_timeout_s, help="queue wait before a refusal, s (default 300)")
    parser.add_argument(
        "--modes",
        default="server,kernel",
        help="comma-separated: server, kernel, server-culled (with --cull-timeout) (default server,kernel)",
    )
    parser.add_argument(
        "--cull-timeout",
        type=float,
        default=None,
        help="GPU idle culling of servers after this many idle seconds: adds the culled server mode and the culling summary and checks",
    )
    parser.add_argument(
        "--kernel-cull-timeout",
        type=float,
        default=DEFAULT_KERNEL_CULL_TIMEOUT,
        help=f"kernel mode: the GPU kernel profile's culling timeout, s (default {DEFAULT_KERNEL_CULL_TIMEOUT:g})",
    )
    parser.add_argument(
        "--open-tab-share",
        type=float,
        default=0.0,
        help="share of sessions left open to the session cap after the student's last activity (default 0)",
    )
    parser.add_argument(
        "--pool-gpus", type=int, default=PoolPlan.gpus, help=f"warm pool GPUs around each lab's start, 0 for none (default {PoolPlan.gpus})"
    )
    parser.add_argument(
        "--pool-lead-min",
        type=float,
        default=PoolPlan.lead_min,
        help=f"the pool comes up this long before a lab (default {PoolPlan.lead_min:g})",
    )
    parser.add_argument(
        "--pool-hold-min", type=float, default=PoolPlan.hold_min, help=f"and goes this long after its start (default {PoolPlan.hold_min:g})"
    )
    parser.add_argument("--policies", default=",".join(POLICIES), help=f"comma-separated, from {', '.join(POLICIES)}")
    parser.add_argument("--plots", type=Path, default=None, help="write the PNG plots into this directory")
    parser.add_argument(
        "--plot-week", type=int, default=6, help="the week shown hour by hour, counted from 0 (default 6: the plots' week 7)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object on one line")
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    policies = [p for p in args.policies.split(",") if p]
    known = mode_factories(cull_timeout=args.cull_timeout)
    bad = [m for m in modes if m not in known] + [p for p in policies if p not in POLICIES]
    if bad or not modes or not policies:
        parser.error(f"unknown mode or policy: {', '.join(bad) or '(none given)'}")
    if args.local_gpus < 0 or args.donor_gpus < 0 or args.donors < 1 or args.start_timeout <= 0:
        parser.error("--local-gpus/--donor-gpus must be >= 0, --donors >= 1, --start-timeout > 0")
    if (args.cull_timeout is not None and args.cull_timeout <= 0) or args.kernel_cull_timeout <= 0 or not 0 <= args.open_tab_share <= 1:
        parser.error("--cull-timeout and --kernel-cull-timeout must be > 0, --open-tab-share in [0, 1]")
    if args.pool_gpus < 0 or args.pool_lead_min < 0 or args.pool_hold_min < 0:
        parser.error("--pool-gpus, --pool-lead-min and --pool-hold-min must be >= 0")
    if not 0 <= args.plot_week < args.weeks:
        parser.error("--plot-week must be one of the simulated weeks")
    params = replace(d, students=args.students, weeks=args.weeks, seed=args.seed, start_timeout_s=args.start_timeout)
    try:
        params.validate()
    except ValueError as exc:
        parser.error(str(exc))
    share, rest = divmod(args.donor_gpus, args.donors)
    donors = tuple((f"donor-{chr(ord('a') + i)}", share + (1 if i < rest else 0)) for i in range(args.donors))
    federation = Federation(local_gpus=args.local_gpus, donor_gpus=donors)
    result, series = run_study(
        params,
        federation,
        modes,
        policies,
        args.donor_latency,
        cull_timeout=args.cull_timeout,
        kernel_cull_timeout=args.kernel_cull_timeout,
        open_tab_share=args.open_tab_share,
        pool=PoolPlan(args.pool_gpus, args.pool_lead_min, args.pool_hold_min),
    )
    if args.plots is not None:
        from jupyter_gpuburst.bench import plots

        result["plots"] = [str(p) for p in plots.write_all(args.plots, result, series, args.plot_week)]
    json.dump(result, sys.stdout, indent=None if args.json else 2)
    sys.stdout.write("\n")
    return 0 if result["ok"] else 1
