"""`gpuburst bench placement`: placement decisions and watch events at cluster scale, end to end.

The production path is timed, with the garbage collector on:

1. **load**: every node and pod of a synthetic federation goes out as watch JSON, is decoded
   with ``json.loads`` and handed to the ``CapacityTracker``'s own callbacks
   (``_on_node_event``/``_on_pod_event``), which feed the inventory. The resident memory this
   adds (inventory, tracker, reservation ledger) is measured as the RSS difference.
2. **events**: pod lifecycles and node heartbeats under churn, one watch event at a time through
   the tracker's pod/node callback. Events that change the inventory and events that change
   nothing (status-only updates, heartbeats) are reported apart; JSON decoding apart too.
3. **decisions**: ``tracker.placer.place`` (snapshot + whole-pod best fit + hold), as the
   spawner calls it, for a pod of the notebook image a third of the nodes already have (so the
   look for a node that has it runs, ``fitindex.IMAGE_SCAN``), with ``--outstanding`` reservations held the whole time: each timed
   decision keeps its hold, and the oldest hold is then released the way a spawn's is, by its
   pod's bind event through the tracker's callback.

Checks can fail: the goals (p99/p99.9 decision, p99 changed event, memory), that every decision
found a place while the reservations were outstanding, that sampled decisions equal a
brute-force scan of every node, that no node is over-committed, and that the incremental
inventory equals a full recount at the end.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import random
import sys
import time
from array import array
from collections import deque
from typing import Any

import psutil

from jupyter_gpuburst.bench import stopping, synthetic
from jupyter_gpuburst.core import images, reasons
from jupyter_gpuburst.core.inventory import Snapshot, full_recount, summarize
from jupyter_gpuburst.core.placement import GPURequest, NoCapacity, Placement, Policy
from jupyter_gpuburst.hub.accounting import Accounting, GPUAccountingSettings
from jupyter_gpuburst.hub.accounting.ledger import UsageLedger
from jupyter_gpuburst.hub.accounting.store import UsageStore
from jupyter_gpuburst.hub.capacity.tracker import CapacityTracker, server_key
from jupyter_gpuburst.hub.settings import GPUBurstSettings

GOALS = {
    "decision_p99_ms": 1.0,
    "decision_p999_ms": 2.0,
    "event_changed_p99_us": 50.0,
    "event_accounting_share_p99_us": 5.0,
    "memory_mib": 1024.0,
}
MIN_SAMPLES = 1000
ORACLE_SAMPLES = 20
# the profiles students pick: (resource, GPUs, CPU millicores, memory bytes)
PROFILES = (
    ("nvidia.com/gpu", 1, 4000, 16 * 2**30),
    ("nvidia.com/gpu", 2, 8000, 32 * 2**30),
    ("nvidia.com/gpu", 4, 16000, 64 * 2**30),
    (synthetic.MIG_RESOURCE, 1, 2000, 8 * 2**30),
)
# the churn's events, by what they do to a pod or node (status updates and heartbeats change
# nothing placement reads; a created pod is unbound until its bind)
EVENT_KINDS = ("pod_created", "pod_bound", "pod_status", "pod_finished", "pod_deleted", "node_heartbeat")
_PROFILE_SHAPE = {0: 0, 1: 1, 2: 2, 3: 3}  # profile -> synthetic.SHAPES index of its pod


def percentiles(values: list[float]) -> dict[str, float]:
    """p50, p99, p99.9 (nearest rank) and max; empty input gives zeros."""
    if not values:
        return {"n": 0, "p50": 0.0, "p99": 0.0, "p999": 0.0, "max": 0.0}
    ordered = sorted(values)

    def rank(q: float) -> float:
        index = min(len(ordered) - 1, max(0, -(-len(ordered) * q // 1) - 1))
        return ordered[int(index)]

    return {"n": len(ordered), "p50": rank(0.50), "p99": rank(0.99), "p999": rank(0.999), "max": ordered[-1]}


def _rounded(stats: dict[str, float], digits: int) -> dict[str, float]:
    return {k: (round(v, digits) if k != "n" else v) for k, v in stats.items()}


def _rss() -> int:
    gc.collect()
    return psutil.Process().memory_info().rss


def _wire(event_type: str, obj: dict[str, Any]) -> bytes:
    return json.dumps({"type": event_type, "object": obj}).encode()


def _deliver(callback: Any, line: bytes) -> tuple[int, int, int]:
    """Decode one watch line and hand it to ``callback``: (decode ns, callback ns, callback CPU ns).

    The wall clock is read inside the CPU clock's window, not around it: reading the thread's
    CPU time is a system call (0.7 µs on a virtual machine), and two of them inside the wall
    window added 1.4 µs to every wall sample, time production never spends.
    """
    t0 = time.perf_counter_ns()
    event = json.loads(line)
    event_type, obj = event["type"], event["object"]
    decoded = time.perf_counter_ns()
    c1 = time.thread_time_ns()
    t1 = time.perf_counter_ns()
    callback(event_type, obj)
    t2 = time.perf_counter_ns()
    c2 = time.thread_time_ns()
    return decoded - t0, t2 - t1, c2 - c1


def _brute_force(snapshot: Snapshot, request: GPURequest, policy: Policy) -> tuple | None:
    """The best rank over every node, read one by one (no index): the oracle for sampled decisions."""
    demand = request.demand()
    best: dict[bool, tuple] = {}
    for node in snapshot.nodes.values():
        if not node.fits(demand):
            continue
        leftover = node.free(request.resource) - request.count
        latency = 0.0 if not node.is_donor else policy.donor_latency.get(node.site, policy.donor_latency_penalty)
        rank = (latency + policy.idle_memory_weight * leftover, node.site)
        if node.is_donor not in best or rank < best[node.is_donor]:
            best[node.is_donor] = rank
    return best.get(False) or best.get(True)  # local-first


class GCPauses:
    """Every collection the garbage collector makes while a phase runs: count, generation, pause."""

    def __init__(self) -> None:
        self.pauses: list[tuple[int, float]] = []
        self._started = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter_ns()
        else:
            self.pauses.append((info["generation"], (time.perf_counter_ns() - self._started) / 1e6))

    def __enter__(self) -> "GCPauses":
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        gc.callbacks.remove(self)

    def summary(self) -> dict[str, Any]:
        by_generation = [sum(1 for g, _ in self.pauses if g == n) for n in range(3)]
        return {
            "collections_by_generation": by_generation,
            "max_pause_ms_by_generation": [round(max((ms for g, ms in self.pauses if g == n), default=0.0), 3) for n in range(3)],
            "max_pause_ms": round(max((ms for _, ms in self.pauses), default=0.0), 3),
            "total_pause_ms": round(sum(ms for _, ms in self.pauses), 3),
        }


def _overcommitted(snapshot: Snapshot) -> list[str]:
    out = []
    for node in snapshot.nodes.values():
        for resource, allocatable in node.allocatable.items():
            if node.requested.get(resource, 0) + node.reserved.get(resource, 0) > allocatable:
                out.append(f"{node.name}:{resource}")
    return out


async def run(
    nodes: int, pods: int, donors: int, outstanding: int, decisions: int, events: int, seed: int, clock: str = "wall"
) -> dict[str, Any]:
    rng = random.Random(seed)
    plan = synthetic.ClusterPlan(nodes, pods, donors, seed=seed)
    settings = GPUBurstSettings()
    policy = settings.policy()
    baseline = _rss()

    # ---- 1. load, through the tracker's callbacks --------------------------------------------
    tracker = CapacityTracker(None, settings)
    tracker.own_namespace(synthetic.SERVER_NAMESPACE)
    # GPU-hours accounting on, as in a hub; its share of each event is timed on its own, so
    # the event figures with and without it come from the same events of the same run
    ledger = UsageLedger(UsageStore(":memory:"), tracker.inventory.pod_requests)
    tracker.accounting = Accounting(GPUAccountingSettings(), ledger)
    ledger_ns = [0]
    ledger_event = ledger.pod_event

    def timed_ledger_event(*args: Any) -> None:
        t0 = time.perf_counter_ns()
        ledger_event(*args)
        ledger_ns[0] += time.perf_counter_ns() - t0

    ledger.pod_event = timed_ledger_event  # type: ignore[method-assign]
    started = time.perf_counter()
    for obj in plan.nodes:
        _deliver(tracker._on_node_event, _wire("ADDED", obj))
    for i in range(len(plan.pod_node)):
        if plan.alive[i]:
            _deliver(tracker._on_pod_event, _wire("ADDED", plan.pod_object(i)))
    tracker.loaded()  # what CapacityTracker.start() does once its first lists are in
    load_s = time.perf_counter() - started
    memory_load = _rss() - baseline

    # ---- 2. churn: pod lifecycles and node heartbeats ------------------------------------------
    # The benchmark's own records are arrays of numbers, which the garbage collector never
    # walks: lists of 20,000 floats would be walked by every full collection and lengthen the
    # very pauses being measured, with work production never does.
    changed_us = array("d")
    noop_us = array("d")
    decode_us = array("d")
    changed_cpu_us = array("d")
    changed_without_accounting_us = array("d")
    accounting_us = array("d")
    # the changed events again, per kind of change (wall, CPU), to see which kind makes the tail
    changed_by_kind: dict[str, tuple[array, array]] = {kind: (array("d"), array("d")) for kind in EVENT_KINDS}
    churn: dict[int, tuple[int, int]] = {}  # churn pod -> (node, shape)
    next_churn = len(plan.pod_node)
    live = array("q", (i for i in range(len(plan.pod_node)) if plan.alive[i]))
    gc_events = GCPauses().__enter__()

    def timed(callback: Any, event_type: str, obj: dict[str, Any], kind: str) -> None:
        before = tracker.inventory.version
        ledger_ns[0] = 0
        decode_ns, callback_ns, cpu_ns = _deliver(callback, _wire(event_type, obj))
        decode_us.append(decode_ns / 1000)
        if tracker.inventory.version != before:
            changed_us.append(callback_ns / 1000)
            changed_cpu_us.append(cpu_ns / 1000)
            changed_without_accounting_us.append((callback_ns - ledger_ns[0]) / 1000)
            accounting_us.append(ledger_ns[0] / 1000)
            by_wall, by_cpu = changed_by_kind[kind]
            by_wall.append(callback_ns / 1000)
            by_cpu.append(cpu_ns / 1000)
        else:
            noop_us.append(callback_ns / 1000)

    version = 2
    while len(changed_us) + len(noop_us) < events:
        version += 1
        roll = rng.random()
        if roll < 0.3:  # a new pod: created unbound, then bound by the scheduler
            n = rng.randrange(plan.n_local)
            shape = rng.choice((0, 3, 4, 5))
            if not plan.fits(n, shape):
                continue
            plan.take(n, shape, +1)
            name = f"pod-{next_churn}"
            churn[next_churn] = (n, shape)
            live.append(next_churn)
            next_churn += 1
            timed(tracker._on_pod_event, "ADDED", synthetic.watch_pod(name, shape, None, phase="Pending", version=version), "pod_created")
            timed(
                tracker._on_pod_event,
                "MODIFIED",
                synthetic.watch_pod(name, shape, plan.node_name(n), phase="Pending", version=version + 1),
                "pod_bound",
            )
        elif roll < 0.5 and live:  # a status update: ready, restarts, IPs
            i = live[rng.randrange(len(live))]
            timed(tracker._on_pod_event, "MODIFIED", _pod(plan, churn, i, version=version), "pod_status")
        elif roll < 0.8 and live:  # a pod ends and is deleted
            i = live.pop(rng.randrange(len(live)))
            n, shape = churn.pop(i) if i in churn else (plan.pod_node[i], plan.pod_shape[i])
            if i < len(plan.alive):
                plan.alive[i] = 0
            plan.take(n, shape, -1)
            obj = _pod(plan, {i: (n, shape)}, i, version=version)
            if rng.random() < 0.5:
                obj["status"]["phase"] = "Succeeded"
                timed(tracker._on_pod_event, "MODIFIED", obj, "pod_finished")
            timed(tracker._on_pod_event, "DELETED", obj, "pod_deleted")
        else:  # a node heartbeat
            obj = plan.nodes[rng.randrange(len(plan.nodes))]
            obj["status"]["conditions"][0]["lastHeartbeatTime"] = f"2026-01-12T09:{version % 60:02d}:00Z"
            timed(tracker._on_node_event, "MODIFIED", obj, "node_heartbeat")
    gc_events.__exit__()
    # the churn's pods are not the hub's, so the ledger passes them by: here the hub's own
    # servers start and end, and the ledger's share of those events is timed too
    hub_pod_us = array("d")
    hub_pod_accounting_us = array("d")
    for i in range(min(1000, events // 4)):
        n = rng.randrange(plan.n_local)
        name, user = f"bench-acct-{i}", f"acct{i}"
        for event_type, node in (("ADDED", None), ("MODIFIED", plan.node_name(n)), ("DELETED", plan.node_name(n))):
            ledger_ns[0] = 0
            _, callback_ns, _ = _deliver(
                tracker._on_pod_event, _wire(event_type, synthetic.watch_pod(name, 0, node, site="origin", user=user, version=version))
            )
            version += 1
            hub_pod_us.append(callback_ns / 1000)
            hub_pod_accounting_us.append(ledger_ns[0] / 1000)
    # what the ledger's deferred write (half a second after a binding, in a hub) costs
    started = time.perf_counter()
    sessions_written = len(ledger._new) + len(ledger._pending)
    ledger.write()
    accounting_write_ms = (time.perf_counter() - started) * 1000

    # ---- 3. decisions with reservations outstanding -------------------------------------------
    placer = tracker.placer
    held: deque[tuple[str, Placement, int]] = deque()
    bench_pods: deque[tuple[str, int, int]] = deque()  # (pod name, node index, shape) bound by us
    node_index = {plan.node_name(n): n for n in range(len(plan.nodes))}
    decision_ms = array("d")
    decision_cpu_ms = array("d")
    outstanding_seen = array("q")
    refused: list[str] = []
    oracle_checked = oracle_mismatches = refused_timed = 0
    oracle_every = max(1, decisions // ORACLE_SAMPLES)
    now = time.monotonic()
    total = outstanding + decisions
    pod_images = (images.normalize(synthetic.NOTEBOOK_IMAGE),)
    by_image = 0
    gc_decisions = GCPauses().__enter__()
    for k in range(total):
        profile = k % len(PROFILES)
        resource, count, cpu, memory = PROFILES[profile]
        user = f"student{k}"
        request = GPURequest(resource, count, user, profile=f"p{profile}", resources={"cpu": cpu, "memory": memory}, images=pod_images)
        key = server_key(user, "")
        timed_one = k >= outstanding
        check = timed_one and (k - outstanding) % oracle_every == 0
        expected = _brute_force(tracker.snapshot(), request, policy) if check else None
        c0 = time.thread_time_ns()
        t0 = time.perf_counter_ns()
        outcome = placer.place(key, request, now)
        elapsed = time.perf_counter_ns() - t0
        cpu = time.thread_time_ns() - c0
        if timed_one:
            decision_ms.append(elapsed / 1e6)
            decision_cpu_ms.append(cpu / 1e6)
            outstanding_seen.append(len(placer.reservations))
        if check:
            oracle_checked += 1
            got = (outcome.loss, outcome.site) if isinstance(outcome, Placement) else None
            if got != expected:
                oracle_mismatches += 1
        if isinstance(outcome, NoCapacity):
            refused.append(outcome.reason)
            refused_timed += timed_one
            continue
        by_image += timed_one and reasons.IMAGE_THERE in outcome.reason
        held.append((key, outcome, _PROFILE_SHAPE[profile]))
        if timed_one and len(held) > outstanding:
            # the oldest spawn's pod is bound: the tracker releases its hold on the bind event
            old_key, placement, shape = held.popleft()
            name = f"bench-{old_key.rstrip('/')}"
            pod = synthetic.watch_pod(name, shape, placement.held_node, phase="Pending", site=placement.site, user=old_key.rstrip("/"))
            _deliver(tracker._on_pod_event, _wire("ADDED", pod))
            bench_pods.append((name, node_index[placement.held_node], shape))
            if len(bench_pods) > outstanding:  # and an older server ends
                name, n, shape = bench_pods.popleft()
                _deliver(
                    tracker._on_pod_event,
                    _wire("DELETED", synthetic.watch_pod(name, shape, plan.node_name(n), user=name.removeprefix("bench-"))),
                )
    gc_decisions.__exit__()
    # what one full collection costs now, when it comes (the thresholds make it rare)
    started = time.perf_counter()
    gc.collect()
    full_collection_ms = (time.perf_counter() - started) * 1000
    memory_end = _rss() - baseline
    snapshot = tracker.snapshot()
    overcommitted = _overcommitted(snapshot)
    holds_at_end = tracker.inventory.holds()

    # ---- the incremental state equals a recount from scratch ----------------------------------
    for key, _placement, _shape in held:
        placer.release(key)
    # streamed: 500 000 pod objects at once would dwarf what is being measured
    all_pods = itertools.chain(
        plan.live_pods(),
        (synthetic.watch_pod(f"pod-{i}", shape, plan.node_name(n)) for i, (n, shape) in churn.items()),
        (synthetic.watch_pod(name, shape, plan.node_name(n), user=name.removeprefix("bench-")) for name, n, shape in bench_pods),
    )
    started = time.perf_counter()
    recount = full_recount(plan.nodes, all_pods, compute=True)
    recount_ms = (time.perf_counter() - started) * 1000  # includes writing the pod objects
    recount_equal = recount == summarize(tracker.snapshot(), compute=True)

    wall_decision, wall_changed = percentiles(decision_ms), percentiles(changed_us)
    cpu_decision, cpu_changed = percentiles(decision_cpu_ms), percentiles(changed_cpu_us)
    decision, changed = (cpu_decision, cpu_changed) if clock == "cpu" else (wall_decision, wall_changed)
    memory_mib = max(memory_load, memory_end) / 2**20
    checks = {
        "decision_samples": _check(len(decision_ms), MIN_SAMPLES, at_least=True),
        "decision_p99_ms": _check(decision["p99"], GOALS["decision_p99_ms"]),
        "decision_p999_ms": _check(decision["p999"], GOALS["decision_p999_ms"]),
        "event_changed_samples": _check(len(changed_us), MIN_SAMPLES, at_least=True),
        "event_changed_p99_us": _check(changed["p99"], GOALS["event_changed_p99_us"]),
        "memory_mib": _check(round(memory_mib, 1), GOALS["memory_mib"]),
        "every_decision_placed": _check(len(refused), 0),
        "outstanding_held": _check(min(outstanding_seen, default=0), outstanding, at_least=True),
        "decisions_equal_brute_force": _check(oracle_mismatches, 0),
        "nodes_overcommitted": _check(len(overcommitted), 0),
        "inventory_equals_recount": _check(int(not recount_equal), 0),
        # GPU-hours accounting adds nothing to the events a hub sees most (not its own pods)
        "event_accounting_share_p99_us": _check(round(percentiles(accounting_us)["p99"], 2), GOALS["event_accounting_share_p99_us"]),
    }
    return {
        "benchmark": "placement",
        "nodes": nodes,
        "pods": pods,
        "pods_loaded": sum(plan.alive) + len(churn),
        "donors": donors,
        "outstanding": outstanding,
        "seed": seed,
        "gc_enabled": gc.isenabled(),
        "gc_thresholds": list(gc.get_threshold()),
        "gc_frozen_objects": gc.get_freeze_count(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        # what the checks judge: "wall" (perf_counter) or "cpu" (this thread's CPU time, which
        # leaves out time the OS gave to other processes on a shared machine)
        "clock": clock,
        "load_s": round(load_s, 2),
        "memory_mib": round(memory_mib, 1),
        "memory_after_load_mib": round(memory_load / 2**20, 1),
        "memory_at_end_mib": round(memory_end / 2**20, 1),
        "decision_ms": _rounded(wall_decision, 4),
        "decision_cpu_ms": _rounded(cpu_decision, 4),
        "decision_p50_ms": round(decision["p50"], 4),
        "decision_p99_ms": round(decision["p99"], 4),
        "decision_p999_ms": round(decision["p999"], 4),
        "decisions": len(decision_ms),
        "placed": len(decision_ms) - refused_timed,
        # placed on a node that already had the pod's image
        "placed_by_image": by_image,
        "outstanding_during_decisions": {"min": min(outstanding_seen, default=0), "max": max(outstanding_seen, default=0)},
        "holds_at_end": holds_at_end,
        "decisions_checked_by_brute_force": oracle_checked,
        "event_changed_us": _rounded(wall_changed, 2),
        "event_changed_cpu_us": _rounded(cpu_changed, 2),
        "event_changed_p99_us": round(changed["p99"], 2),
        # the same changed events without the accounting's share (before), and that share
        "event_changed_without_accounting_us": _rounded(percentiles(changed_without_accounting_us), 2),
        "event_accounting_share_us": _rounded(percentiles(accounting_us), 2),
        "hub_pod_event_us": _rounded(percentiles(hub_pod_us), 2),
        "hub_pod_event_accounting_share_us": _rounded(percentiles(hub_pod_accounting_us), 2),
        "accounting_write": {"changes": sessions_written, "ms": round(accounting_write_ms, 2)},
        "event_changed_by_kind": {
            kind: {"wall_us": _rounded(percentiles(wall), 2), "cpu_us": _rounded(percentiles(cpu), 2)}
            for kind, (wall, cpu) in changed_by_kind.items()
            if wall
        },
        "event_noop_us": _rounded(percentiles(noop_us), 2),
        "event_decode_us": _rounded(percentiles(decode_us), 2),
        "event_apply_p99_us": round(changed["p99"], 2),
        "gc_during_events": gc_events.summary(),
        "gc_during_decisions": gc_decisions.summary(),
        "full_collection_ms": round(full_collection_ms, 2),
        "full_recount_ms": round(recount_ms, 1),
        "refusals": refused[:3],
        "checks": checks,
        "ok": all(c["ok"] for c in checks.values()),
    }


def _pod(plan: synthetic.ClusterPlan, churn: dict[int, tuple[int, int]], i: int, *, version: int) -> dict[str, Any]:
    if i in churn:
        n, shape = churn[i]
        return synthetic.watch_pod(f"pod-{i}", shape, plan.node_name(n), version=version)
    return plan.pod_object(i, version=version)


def _check(value: float, limit: float, *, at_least: bool = False) -> dict[str, Any]:
    ok = value >= limit if at_least else value <= limit
    return {"value": value, ("min" if at_least else "max"): limit, "ok": ok}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="gpuburst bench placement", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=5000, help="origin GPU nodes (default 5000)")
    parser.add_argument("--pods", type=int, default=50000, help="pods bound to those nodes (default 50000)")
    parser.add_argument("--donors", type=int, default=3, help="Liqo donors, one virtual node each (default 3)")
    parser.add_argument("--outstanding", type=int, default=2000, help="reservations held while decisions are timed (default 2000)")
    parser.add_argument(
        "--decisions", type=int, default=2000, help=f"timed decisions (default 2000; fewer than {MIN_SAMPLES} fails its check)"
    )
    parser.add_argument("--events", type=int, default=20000, help="timed watch events under churn (default 20000)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="what the latency checks judge: wall time (default) or the thread's CPU time, for a machine shared with other work",
    )
    parser.add_argument("--json", action="store_true", help="print the JSON on one line (default: indented)")
    args = parser.parse_args(argv)
    for name in ("nodes", "pods", "decisions", "events"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    for name in ("donors", "outstanding"):
        if getattr(args, name) < 0:
            parser.error(f"--{name} must not be negative")
    result = stopping.run(run(args.nodes, args.pods, args.donors, args.outstanding, args.decisions, args.events, args.seed, args.clock))
    json.dump(result, sys.stdout, indent=None if args.json else 2)
    sys.stdout.write("\n")
    return 0 if result["ok"] else 1
