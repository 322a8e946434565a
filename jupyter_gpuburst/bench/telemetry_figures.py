"""The figures `gpuburst bench telemetry` draws from its status calls and its server's reports.

Pure functions over what the benchmark collected: status p99 ratios (per round, pooled, with a
bootstrap interval), which calls belong to a block, what the slowest calls overlapped on the
server's timeline, the loop's lag less the time the OS kept it off its CPU, and the server's
reports pooled over blocks and rounds.
"""

from __future__ import annotations

import bisect
import math
import random
import statistics

from jupyter_gpuburst.bench.stats import percentile

SLOWEST_SHARE = 0.025  # the status calls examined: the slowest 2.5 %, those that set p99 and beyond
# a status call's own steps: its handler, and the I/O dispatch and request parsing of its connection
OWN_STEPS = ("(APIStatusHandler", "(the status calls' connection)")
BOOTSTRAP_RESAMPLES = 400


def p99_ratios(rounds: list[dict], over: str, under: str, key: str = "status_ms") -> dict:
    """``over``'s status p99 divided by ``under``'s, round by round: each, the median, the spread."""
    ratios = [r[over][key]["p99"] / r[under][key]["p99"] for r in rounds if r[under][key]["p99"] and r[over][key]["p99"]]
    return {
        "per_round": [round(v, 3) for v in ratios],
        "median": round(statistics.median(ratios), 3) if ratios else None,
        "min": round(min(ratios), 3) if ratios else None,
        "max": round(max(ratios), 3) if ratios else None,
    }


def pooled_p99_ratio(over: list[float], under: list[float]) -> float | None:
    """The p99 of every ``over`` call divided by that of every ``under`` call."""
    top, bottom = percentile(over, 99), percentile(under, 99)
    return round(top / bottom, 3) if top is not None and bottom else None


def bootstrap_p99_ratio(
    over: list[list[float]], under: list[list[float]], resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0
) -> list[float] | None:
    """A 90 % interval of the pooled p99 ratio: the cycles (``over[i]`` and ``under[i]``, the
    calls of cycle ``i``) drawn again with replacement, ``resamples`` times. Whole cycles, not
    single calls: the tail comes in episodes of the machine's that span many calls in a row."""
    if len(over) != len(under) or len(over) < 2:
        return None
    draw = random.Random(seed)
    ratios = []
    for _ in range(resamples):
        picked = [draw.randrange(len(over)) for _ in over]
        ratio = pooled_p99_ratio([v for i in picked for v in over[i]], [v for i in picked for v in under[i]])
        if ratio is not None:
            ratios.append(ratio)
    if not ratios:
        return None
    ratios.sort()
    return [ratios[int(0.05 * (len(ratios) - 1))], ratios[math.ceil(0.95 * (len(ratios) - 1))]]


def lags_less_cpu_wait(lags: list[float], waits: list[float]) -> list[float]:
    """Each lag less the time its tick's thread waited for a CPU (``waits[i]`` belongs to
    ``lags[i]``): what the loop's own work held it; empty where the server reported no waits."""
    if len(waits) != len(lags):
        return []
    return [max(0.0, lag - wait) for lag, wait in zip(lags, waits, strict=True)]


def lag_max_split(lags: list[float], waits: list[float]) -> dict | None:
    """The largest lag (ms) and how it splits: the CPU wait in its tick and the rest, the loop's
    own work or a stall of the machine's (None where the server reported no waits)."""
    less = lags_less_cpu_wait(lags, waits)
    if not less:
        return None
    worst = max(range(len(lags)), key=lags.__getitem__)
    lag, own = lags[worst], less[worst]
    return {"lag_ms": round(lag * 1000, 4), "cpu_wait_ms": round((lag - own) * 1000, 4), "less_cpu_wait_ms": round(own * 1000, 4)}


def calls_within(calls: list[tuple[float, float, float | None]], t0: float, t1: float) -> list:
    """The calls (in order of their start) that started in ``[t0, t1)``."""
    starts = [c[0] for c in calls]
    return calls[bisect.bisect_left(starts, t0) : bisect.bisect_left(starts, t1)]


def pooled_tail(rounds: list[dict], phase: str, key: str) -> dict:
    """Pooled over rounds: n summed, p99/p99.9 the worst round's, max the maximum."""
    parts = [r[phase][key] for r in rounds]

    def worst(k: str) -> float | None:
        return max((p[k] for p in parts if p[k] is not None), default=None)

    return {"n": sum(p["n"] for p in parts), "p50": worst("p50"), "p99": worst("p99"), "p99_9": worst("p99_9"), "max": worst("max")}


def slowest_status_overlapped(calls: list[tuple[float, float]], timeline: list[list], share: float = SLOWEST_SHARE) -> dict:
    """What the server's loop, its sampler worker and the OS (the loop thread's waits for its
    CPU) did while the slowest ``share`` of the status ``calls`` (``(started, seconds)``) were in
    flight. ``timeline``: ``[started, seconds, what]`` on the same clock. Per name: the calls it
    overlapped, and for how long in all (ms)."""
    if not calls:
        return {"calls": 0, "slower_than_ms": None, "overlapping_nothing": 0, "by_what": {}}
    slowest = sorted(calls, key=lambda c: c[1], reverse=True)[: max(1, math.ceil(len(calls) * share))]
    steps = sorted(tuple(t) for t in timeline if not any(own in t[2] for own in OWN_STEPS))
    starts = [t[0] for t in steps]
    longest = max((t[1] for t in steps), default=0.0)
    by_what: dict[str, dict] = {}
    alone = 0
    for started, seconds in slowest:
        ended = started + seconds
        overlaps: dict[str, float] = {}
        for step_start, step_s, what in steps[bisect.bisect_left(starts, started - longest) : bisect.bisect_right(starts, ended)]:
            overlap = min(ended, step_start + step_s) - max(started, step_start)
            if overlap > 0:
                overlaps[what] = overlaps.get(what, 0.0) + overlap
        alone += not overlaps
        for what, overlap in overlaps.items():
            entry = by_what.setdefault(what, {"calls": 0, "overlap_ms": 0.0})
            entry["calls"] += 1
            entry["overlap_ms"] += overlap * 1000
    ranked = sorted(by_what.items(), key=lambda kv: (-kv[1]["calls"], -kv[1]["overlap_ms"]))
    return {
        "calls": len(slowest),
        "slower_than_ms": round(slowest[-1][1] * 1000, 3),
        "overlapping_nothing": alone,
        "by_what": {what: {"calls": e["calls"], "overlap_ms": round(e["overlap_ms"], 3)} for what, e in ranked},
    }


def pooled_overlaps(parts: list[dict]) -> dict:
    by_what: dict[str, dict] = {}
    for part in parts:
        for what, entry in part["by_what"].items():
            pooled = by_what.setdefault(what, {"calls": 0, "overlap_ms": 0.0})
            pooled["calls"] += entry["calls"]
            pooled["overlap_ms"] = round(pooled["overlap_ms"] + entry["overlap_ms"], 3)
    return {
        "calls": sum(p["calls"] for p in parts),
        "overlapping_nothing": sum(p["overlapping_nothing"] for p in parts),
        "by_what": dict(sorted(by_what.items(), key=lambda kv: (-kv[1]["calls"], -kv[1]["overlap_ms"]))),
    }


def merge_what_ran(reports: list[dict], keep: int = 25) -> dict:
    slow = sorted((s for r in reports for s in r["slow_callbacks"]), key=lambda s: -s["ms"])[:keep]
    gc_by_generation: dict[str, dict] = {}
    for r in reports:
        for generation, e in r["gc"].items():
            pooled = gc_by_generation.setdefault(generation, {"n": 0, "max_ms": 0.0, "total_ms": 0.0})
            pooled["n"] += e["n"]
            pooled["max_ms"] = max(pooled["max_ms"], e["max_ms"])
            pooled["total_ms"] = round(pooled["total_ms"] + e["total_ms"], 3)
    return {"slow_callbacks": slow, "gc": dict(sorted(gc_by_generation.items()))}
