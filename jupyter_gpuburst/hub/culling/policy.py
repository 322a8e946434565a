"""The culling decision for one server or GPU kernel: keep, warn, stop, or leave alone (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from jupyter_gpuburst.hub.culling.settings import CullPolicy
from jupyter_gpuburst.hub.culling.store import Signal

# what a student reads in the panel and on the spawn page; {what} is "server" or "kernel"
IDLE_REASON = "its GPU was idle for {idle} (the limit for this {what} is {limit}), so the GPU went back for others"
AGE_REASON = "it reached the maximum age of {limit} for this {what}, so the GPU went back for others"
SILENT_REASON = "the hub heard nothing of its GPU for {silent} (the limit for this {what} is {limit}), so the GPU went back for others"


@dataclass(frozen=True)
class Decision:
    action: str  # "off", "exempt", "unknown", "no-gpu", "active", "warn", "stop"
    idle_s: float | None = None
    stops_in_s: float | None = None
    reason: str = ""
    keepable: bool = False  # a Keep helps: the stop comes from idleness, not the maximum age
    cause: str = ""  # what the stop comes from: "idle", "age", "silent" or "budget" (culling/budget.py)


def decide(
    signal: Signal,
    state: str,
    policy: CullPolicy,
    now: float,
    *,
    age_s: float | None,
    site_kind: str,
    groups: frozenset[str],
    holds_gpu: bool = True,
) -> Decision:
    """``state`` is the store's (``unknown``, ``no-gpu``, ``reported``); ``age_s`` how long the
    server or kernel has run (None: not known, so no maximum age applies); ``holds_gpu`` False
    for a server placed without GPUs, which is never stopped as silent. Idleness comes only
    from reports; the maximum age and the silence limit hold without any."""
    what = "server" if signal.kind == "server" else "GPU kernel"
    if not policy.enabled:
        return Decision("off")
    if groups & policy.exempt_groups:
        return Decision("exempt")
    idle = signal.idle_s(now) if state == "reported" else None
    # the stop that comes first decides: idleness (only when known), the maximum age (known from
    # the hub's own records) or the silence limit (when no report came for three periods)
    candidates: list[tuple[float, str, bool, str]] = []
    if idle is not None:
        limit = policy.timeout_for(site_kind)
        candidates.append((limit - idle, IDLE_REASON.format(idle=duration(idle), what=what, limit=duration(limit)), True, "idle"))
    if policy.max_age_s > 0 and age_s is not None:
        candidates.append((policy.max_age_s - age_s, AGE_REASON.format(limit=duration(policy.max_age_s), what=what), False, "age"))
    if state == "unknown" and policy.silent_s > 0 and holds_gpu:
        # only once silent for three periods: a server that reports is never stopped as silent
        silent = signal.silent_s(now)
        reason = SILENT_REASON.format(silent=duration(silent), what=what, limit=duration(policy.silent_s))
        candidates.append((policy.silent_s - silent, reason, False, "silent"))
    if not candidates:
        return Decision(state if state in ("unknown", "no-gpu") else "active", idle)
    stops_in, reason, keepable, cause = min(candidates)
    keepable = keepable and signal.keeps < policy.keep_limit
    if stops_in <= 0:
        return Decision("stop", idle, 0.0, reason, cause=cause)
    if stops_in <= policy.warning_s:
        return Decision("warn", idle, stops_in, reason, keepable, cause)
    # a silent one stays "unknown" until its warning: its GPU may be busy or idle
    return Decision("unknown" if state == "unknown" else "active", idle, stops_in)


def duration(seconds: float) -> str:
    """'45 s', '50 min', '2 h', '2 h 30 min': how long, as the panel says it."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes = round(seconds / 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h" + (f" {minutes} min" if minutes else "")
