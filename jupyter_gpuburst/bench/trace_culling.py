"""GPU idle culling in the capacity study: the product's stop rule applied to each session.

The rule is the hub's (``hub/culling``): a server or GPU kernel is stopped at the first culling
sweep (every ``period_s``) at or after its last busy moment plus the timeout; a server counts as
busy when it starts. The sessions' busy periods come from the trace, so the study can count the
sessions culled while the student was still working: those with a busy period after the stop.

Students sometimes leave: ``with_open_tabs`` extends a share of sessions, after their last
activity, to the trace's cap (``session_cap_h``, as an idle culler's maximum age would), with no
further busy period: the tab left open all night that the product exists to catch.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from jupyter_gpuburst.bench.trace_model import HOUR, Session, TraceParams
from jupyter_gpuburst.hub.culling.settings import GPUCullingSettings


@dataclass(frozen=True)
class CullRule:
    """When the product stops something idle since ``last_busy`` (seconds, trace time)."""

    timeout_s: float
    period_s: float

    @classmethod
    def product_default(cls, timeout_s: float | None = None) -> CullRule:
        settings = GPUCullingSettings()
        return cls(timeout_s if timeout_s is not None else settings.timeout_seconds, settings.period_seconds)

    def stop_at(self, last_busy: float) -> float:
        due = last_busy + self.timeout_s
        return math.ceil(due / self.period_s) * self.period_s


def server_stop(session: Session, rule: CullRule) -> float | None:
    """When a GPU server of ``session`` is stopped for idleness, or None when it ends first."""
    last = session.start
    end = session.start + session.length
    for offset, length in session.busy:
        stop = rule.stop_at(last)
        if stop <= session.start + offset:
            return stop if stop < end else None
        last = session.start + offset + length
    stop = rule.stop_at(last)
    return stop if stop < end else None


def worked_after(session: Session, at: float) -> bool:
    """Whether the student computed again after ``at`` in this session."""
    return any(session.start + offset + length > at for offset, length in session.busy)


def with_open_tabs(sessions: list[Session], params: TraceParams, share: float, seed: int = 0) -> list[Session]:
    """``share`` of the sessions left open to the trace's cap after their last activity."""
    if share <= 0:
        return sessions
    rng = random.Random(params.seed * 7919 + seed)
    cap = params.session_cap_h * HOUR
    return [replace(s, length=max(s.length, cap)) if rng.random() < share else s for s in sessions]


def culling_summary(sessions: list[Session], rule: CullRule) -> dict[str, float | int]:
    """GPU-hours a culled server gives back, and the sessions it stops while the student works."""
    held = held_culled = active = 0.0
    culled = while_working = 0
    for s in sessions:
        busy = sum(b for _, b in s.busy)
        held += s.length * s.gpus
        active += busy * s.gpus
        stop = server_stop(s, rule)
        if stop is None:
            held_culled += s.length * s.gpus
            continue
        culled += 1
        while_working += worked_after(s, stop)
        held_culled += (stop - s.start) * s.gpus
    idle = held - active
    returned = held - held_culled
    return {
        "timeout_s": rule.timeout_s,
        "period_s": rule.period_s,
        "sessions": len(sessions),
        "sessions_culled": culled,
        "culled_while_working": while_working,
        "culled_while_working_share": round(while_working / max(1, len(sessions)), 4),
        "gpu_hours_held_idle": round(idle / HOUR, 1),
        "gpu_hours_given_back": round(returned / HOUR, 1),
        "idle_given_back_share": round(returned / idle, 4) if idle else 0.0,
    }
