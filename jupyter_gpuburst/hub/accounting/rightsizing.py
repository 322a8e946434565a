"""Right-sizing: the smallest profile that would have held a user's past GPU sessions, and the
profiles whose sessions use a small share of what they hold.

It reads what the ledger keeps of each session (its peak GPU memory, the devices' memory, its
utilization; see ``store.Use``), never Kubernetes. A profile's GPU memory is what its GPU
resource holds per unit times its count: a MIG slice says it in its name (``1g.10gb``: 10 GB),
a whole GPU from ``GPUBurstSettings.resource_memory_gib`` or, without it, from what sessions on
that resource measured (the least, so that what is suggested fits the smallest GPU of that name).
"""

from __future__ import annotations

import logging
import re
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from jupyter_gpuburst.hub.accounting.store import Session

DAY_S = 86400.0
log = logging.getLogger(__name__)

GIB = 2.0**30
GB = 1e9
MIG = re.compile(r"^nvidia\.com/mig-(?P<slice>\d+g\.(?P<gb>\d+)gb)$")
WHOLE_GPU = "nvidia.com/gpu"


@dataclass(frozen=True)
class Offer:
    """A profile the user may pick: its name as they see it, and the GPUs it holds."""

    slug: str
    display_name: str
    resource: str
    count: int


def mig_slice(resource: str) -> str | None:
    """``nvidia.com/mig-1g.10gb`` -> ``1g.10gb``; None for anything else."""
    match = MIG.match(resource)
    return match.group("slice") if match else None


def unit_memory_bytes(resource: str, configured_gib: Mapping[str, float], sessions: Iterable[Session] = ()) -> float | None:
    """GPU memory of one unit of ``resource``: the MIG slice's name, the admin's
    ``resource_memory_gib``, else the least any session on it measured per unit (sites may have
    GPUs of different sizes under one name: a suggestion must fit the smallest); None if unknown."""
    match = MIG.match(resource)
    if match:
        return float(match.group("gb")) * GB
    if resource in configured_gib:
        return float(configured_gib[resource]) * GIB
    measured = [s.use.memory_total_bytes / s.count for s in sessions if s.resource == resource and s.use.memory_total_bytes and s.count]
    return min(measured) if measured else None


def held_bytes(session: Session, unit: Callable[[str], float | None]) -> float | None:
    """GPU memory a session held: its GPUs' memory, or what its devices measured where that is
    more (or the only figure); a server that sees fewer GPUs than it was given held them all."""
    per_unit = unit(session.resource)
    held = [v for v in (per_unit * session.count if per_unit else None, session.use.memory_total_bytes) if v]
    return max(held) if held else None


def gib(value: float) -> str:
    """6442450944 -> '6 GiB'; 0.5 GiB and 1.5 GiB keep their tenth."""
    figure = value / GIB
    return f"{figure:.0f} GiB" if figure >= 10 or abs(figure - round(figure)) < 0.05 else f"{figure:.1f} GiB"


def offer_phrase(offer: Offer) -> str:
    """'a MIG 1g.10gb slice', '2 MIG 3g.40gb slices', 'one GPU', '2 GPUs'."""
    slice_ = mig_slice(offer.resource)
    if slice_:
        return f"a MIG {slice_} slice" if offer.count == 1 else f"{offer.count} MIG {slice_} slices"
    if offer.resource == WHOLE_GPU:
        return "one GPU" if offer.count == 1 else f"{offer.count} GPUs"
    return f"{offer.count} × {offer.resource}"


def suggestion(
    sessions: Sequence[Session],
    offers: Iterable[Offer],
    unit: Callable[[str], float | None],
    wanted: int,
    headroom: float,
) -> str:
    """The sentence for the spawn form and the launcher, or "".

    ``sessions``: the user's latest measured GPU sessions, latest first. Nothing is said with
    fewer than ``wanted`` of them, or when no offer holds less than the latest session held while
    holding their peak plus ``headroom`` (a fraction)."""
    if wanted <= 0 or len(sessions) < wanted:
        return ""
    recent = list(sessions[:wanted])
    peak = max(s.use.peak_memory_bytes or 0.0 for s in recent)
    latest_held = held_bytes(recent[0], unit)
    if latest_held is None:
        return ""
    need = peak * (1.0 + headroom)
    fitting = []
    for offer in offers:
        per_unit = unit(offer.resource)
        if per_unit is None or offer.count < 1:
            continue
        memory = per_unit * offer.count
        if need <= memory < latest_held:
            fitting.append((memory, offer.count, offer.display_name, offer))
    if not fitting:
        return ""
    best = min(fitting, key=lambda item: item[:3])[3]
    return f'Your last {wanted} GPU sessions peaked at {gib(peak)} of GPU memory: {offer_phrase(best)} would do ("{best.display_name}").'


def oversized_profiles(
    sessions: Iterable[Session], unit: Callable[[str], float | None], small_share: float, min_sessions: int
) -> list[dict[str, Any]]:
    """Per profile and GPU resource, what its measured sessions used of what they held, for the
    admin's page: those whose median peak memory is at most ``small_share`` of it, smallest
    share first, with the figures."""
    groups: dict[tuple[str, str, int], list[Session]] = defaultdict(list)
    for session in sessions:
        groups[(session.profile, session.resource, session.count)].append(session)
    out = []
    for (profile, resource, count), members in groups.items():
        shares, peaks = [], []
        util_sum, util_samples, util_peak = 0.0, 0, None
        for session in members:
            held = held_bytes(session, unit)
            if not held or session.use.peak_memory_bytes is None:
                continue
            shares.append(min(1.0, session.use.peak_memory_bytes / held))
            peaks.append(session.use.peak_memory_bytes)
            util_sum += session.use.utilization_sum
            util_samples += session.use.utilization_samples
            if session.use.peak_utilization is not None:
                util_peak = max(util_peak or 0.0, session.use.peak_utilization)
        if len(shares) < max(1, min_sessions):
            continue
        median = statistics.median(shares)
        if median > small_share:
            continue
        per_unit = unit(resource)
        out.append(
            {
                "profile": profile,
                "resource": resource,
                "count": count,
                "sessions": len(shares),
                "held_gib": round(per_unit * count / GIB, 1) if per_unit else None,
                "median_peak_gib": round(statistics.median(peaks) / GIB, 2),
                "max_peak_gib": round(max(peaks) / GIB, 2),
                "median_memory_share": round(median, 3),
                "mean_utilization": round(util_sum / util_samples, 3) if util_samples else None,
                "peak_utilization": None if util_peak is None else round(util_peak, 3),
            }
        )
    out.sort(key=lambda item: (item["median_memory_share"], item["profile"]))
    return out


# ---- the hub's side: the spawner, the kernel API and the capacity page ask these -------------
def _configured_gib(tracker: Any) -> Mapping[str, float]:
    settings = getattr(tracker, "settings", None)
    return dict(getattr(settings, "resource_memory_gib", None) or {})


def _unit(tracker: Any, sessions: Iterable[Session], ledger: Any = None) -> Callable[[str], float | None]:
    """A profile's GPU memory per unit: its MIG name, the admin's figure, ``sessions``' own
    measurements, else (asked only then) what any session of the ledger measured."""
    configured = _configured_gib(tracker)
    known = list(sessions)
    cache: dict[str, float | None] = {}

    def unit(resource: str) -> float | None:
        if resource not in cache:
            found = unit_memory_bytes(resource, configured, known)
            if found is None and ledger is not None:
                found = ledger.unit_memory(resource)
            cache[resource] = found
        return cache[resource]

    return unit


def suggestion_for(tracker: Any, user: str, offers: Iterable[Offer]) -> str:
    """The right-sizing sentence for ``user`` choosing among ``offers``, or "" (accounting off,
    too few measured sessions, nothing smaller that fits, or the ledger unreadable)."""
    accounting = getattr(tracker, "accounting", None)
    if accounting is None:
        return ""
    settings = accounting.settings
    wanted = settings.right_sizing_sessions
    if wanted <= 0:
        return ""
    try:
        ledger = accounting.ledger
        recent = ledger.measured_sessions(user=user, limit=wanted)
        if len(recent) < wanted:
            return ""
        return suggestion(recent, offers, _unit(tracker, recent, ledger), wanted, settings.right_sizing_headroom)
    except Exception:  # a ledger that cannot be read must not stop the spawn form
        log.exception("Could not read the GPU sessions of %s for right-sizing", user)
        return ""


def oversized_for(tracker: Any) -> list[dict[str, Any]] | None:
    """The capacity page's list of profiles whose sessions use a small share of what they hold."""
    accounting = getattr(tracker, "accounting", None)
    if accounting is None:
        return None
    settings = accounting.settings
    ledger = accounting.ledger
    sessions = ledger.measured_sessions(since=ledger.clock() - settings.right_sizing_days * DAY_S)
    return oversized_profiles(
        sessions, _unit(tracker, sessions, ledger), settings.right_sizing_small_share, max(1, settings.right_sizing_sessions)
    )
