"""The warm pools' cost in the capacity study: GPU-hours placeholders hold around each lab's start.

Per lab (each section's start, each week), a pool of ``gpus`` placeholders comes up ``lead_min``
minutes before the lab and goes ``hold_min`` minutes after its start, as an admin would schedule
it (docs/warm-pools.md). The lab's students take its placeholders in the order they press Start:
a placeholder costs the pool from its coming up until a student takes it (then the GPU is the
student's) or the pool goes. The students who arrive while a placeholder is left are the ones
who find a warm GPU; the rest wait for an image pull (and for capacity) as without a pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jupyter_gpuburst.bench.trace_model import DAY, HOUR, WEEK, Session, TraceParams


@dataclass(frozen=True)
class PoolPlan:
    gpus: int = 8
    lead_min: float = 30.0
    hold_min: float = 15.0


def lab_starts(params: TraceParams) -> list[float]:
    """Every lab's start, in the trace's seconds."""
    return sorted(week * WEEK + weekday * DAY + hour * HOUR for week in range(params.weeks) for weekday, hour, _ in params.lab_sections)


def pool_cost(sessions: list[Session], params: TraceParams, plan: PoolPlan) -> dict[str, Any]:
    """GPU-hours the placeholders hold over the semester, and the lab students who find one."""
    starts = lab_starts(params)
    arrivals: dict[float, list[float]] = {t0: [] for t0 in starts}
    for session in sessions:
        if not session.lab:
            continue
        # a lab session belongs to the latest lab start at or before it
        t0 = max((t for t in starts if t <= session.start), default=None)
        if t0 is not None:
            arrivals[t0].append(session.start)
    held_s = 0.0
    warm = 0
    lab_students = 0
    for t0, times in arrivals.items():
        up, down = t0 - plan.lead_min * 60, t0 + plan.hold_min * 60
        taken = sorted(t for t in times if t < down)[: plan.gpus]
        warm += len(taken)
        lab_students += len(times)
        held_s += sum(t - up for t in taken) + (plan.gpus - len(taken)) * (down - up)
    labs = len(starts)
    return {
        "pool_gpus": plan.gpus,
        "lead_min": plan.lead_min,
        "hold_min": plan.hold_min,
        "labs": labs,
        "gpu_hours_held": round(held_s / HOUR, 1),
        "gpu_hours_per_lab": round(held_s / HOUR / labs, 2) if labs else 0.0,
        "lab_students": lab_students,
        "lab_students_warm": warm,
        "warm_share": round(warm / lab_students, 3) if lab_students else 0.0,
    }
