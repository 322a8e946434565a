"""`gpuburst bench placement`: decision latency and event cost of the placement core.

Builds a synthetic federation through the same event path the spawner uses (ADDED events into
the Inventory), then times three things in one run: single decisions (decide + reserve, then
the bind event and release, as a spawn does), single watch events under churn, and the naive
full recount that the incremental inventory replaces.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time

from jupyter_gpuburst.core.inventory import Inventory, full_recount, summarize
from jupyter_gpuburst.core.placement import GPURequest, Placement, Placer, Policy
from jupyter_gpuburst.bench import synthetic


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def run(nodes: int, pods: int, decisions: int, events: int, seed: int) -> dict:
    rng = random.Random(seed)
    node_objs = synthetic.federation(nodes, seed=seed)
    pod_objs = synthetic.bound_pods(node_objs, pods, seed=seed + 1)

    inventory = Inventory()
    load_started = time.perf_counter()
    inventory.load(node_objs, pod_objs)
    load_s = time.perf_counter() - load_started
    if summarize(inventory.snapshot()) != full_recount(node_objs, pod_objs):
        raise AssertionError("incremental inventory disagrees with the full recount")

    # Churn: pods finish, get deleted, new ones arrive; each event is timed alone.
    live = {p["metadata"]["name"]: p for p in pod_objs}
    names = list(live)
    node_names = [n["metadata"]["name"] for n in node_objs]
    event_us: list[float] = []
    for i in range(events):
        roll = rng.random()
        if roll < 0.4 and names:
            name = names.pop(rng.randrange(len(names)))
            pod = live.pop(name)
            event_type = "DELETED"
        elif roll < 0.6 and names:
            pod = dict(live[rng.choice(names)])
            pod["status"] = {"phase": "Succeeded"}
            event_type = "MODIFIED"
        else:
            name = f"churn-{i}"
            pod = synthetic.pod(name, node_name=rng.choice(node_names), gpus={"nvidia.com/gpu": 1})
            live[name] = pod
            names.append(name)
            event_type = "ADDED"
        started = time.perf_counter_ns()
        inventory.apply_pod_event(event_type, pod)
        event_us.append((time.perf_counter_ns() - started) / 1000)

    placer = Placer(Policy())
    requests = [
        GPURequest("nvidia.com/gpu", 1, "u1"),
        GPURequest("nvidia.com/gpu", 2, "u2"),
        GPURequest("nvidia.com/gpu", 4, "u3"),
        GPURequest(synthetic.MIG_RESOURCE, 1, "u4"),
    ]
    decision_ms: list[float] = []
    placed = 0
    now = time.time()
    for i in range(decisions):
        request = requests[i % len(requests)]
        key = f"spawn-{i}"
        started = time.perf_counter_ns()
        outcome = placer.place(key, request, inventory.snapshot(), now)
        decision_ms.append((time.perf_counter_ns() - started) / 1e6)
        if isinstance(outcome, Placement):
            placed += 1
            pod = synthetic.pod(key, node_name=outcome.node, gpus={outcome.resource: outcome.count}, site=outcome.site, user=request.user)
            inventory.apply_pod_event("ADDED", pod)
            placer.release(key)

    recount_ms = []
    for _ in range(3):
        started = time.perf_counter()
        full_recount(node_objs, list(live.values()))
        recount_ms.append((time.perf_counter() - started) * 1000)

    return {
        "benchmark": "placement",
        "nodes": nodes,
        "pods": pods,
        "donors": 3,
        "decisions": decisions,
        "placed": placed,
        "events": events,
        "load_s": round(load_s, 3),
        "decision_p50_ms": round(_percentile(decision_ms, 50), 4),
        "decision_p99_ms": round(_percentile(decision_ms, 99), 4),
        "event_apply_p50_us": round(_percentile(event_us, 50), 2),
        "event_apply_p99_us": round(_percentile(event_us, 99), 2),
        "full_recount_ms": round(statistics.median(recount_ms), 2),
        "recount_to_event_ratio": round(statistics.median(recount_ms) * 1000 / max(_percentile(event_us, 50), 1e-9), 1),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuburst bench placement", description=__doc__)
    parser.add_argument("--nodes", type=int, default=5000, help="local GPU nodes (plus 3 donor virtual nodes)")
    parser.add_argument("--pods", type=int, default=50000, help="pods bound to those nodes")
    parser.add_argument("--decisions", type=int, default=2000, help="placement decisions to time")
    parser.add_argument("--events", type=int, default=20000, help="churn watch events to time")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print one JSON object (the default output)")
    args = parser.parse_args(argv)
    for name in ("nodes", "pods", "decisions", "events"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    result = run(args.nodes, args.pods, args.decisions, args.events, args.seed)
    json.dump(result, sys.stdout, indent=None if args.json else 2)
    sys.stdout.write("\n")
    return 0
