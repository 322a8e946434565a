"""How a lab went, for its teacher: who started and how fast, GPU-hours used against booked,
held idle, and who was still waiting.

Pure: the starts come from the lab book (the spawner notes each class student's Start and the
moment the server was ready), the GPU-seconds from the GPU-hours ledger (hub/accounting).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from jupyter_gpuburst.hub.labs.model import Booking


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank ``q`` percentile (0-100); None without values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def lab_index(booking: Booking, now: dt.datetime, warmup: dt.timedelta) -> int | None:
    """The latest of its labs whose window has opened by ``now`` (None: none yet)."""
    opened = [i for i, (start, _end) in enumerate(booking.occurrences()) if start - warmup <= now]
    return opened[-1] if opened else None


def lab_report(
    booking: Booking,
    index: int,
    starts: Iterable[tuple[str, float, float | None]],
    usage: Iterable[Mapping[str, Any]],
    members: Iterable[str],
    now: dt.datetime,
    warmup: dt.timedelta,
    counts_idle: bool,
) -> dict[str, Any]:
    """The report of the booking's lab ``index``. ``usage``: the ledger's rows (per session and
    day) of the class's sessions on the lab's days; ``members``: the class group's users."""
    start, end = booking.occurrences()[index]
    opens, closes = (start - warmup).timestamp(), min(end, now).timestamp()
    starts = list(starts)
    waits = [ready - asked for _user, asked, ready in starts if ready is not None]
    started = sorted({user for user, _asked, ready in starts if ready is not None})
    waiting = sorted({user for user, _asked, ready in starts if ready is None})
    used = idle = 0.0
    seen: set[str] = set()
    for row in usage:
        if row["resource"] != booking.resource:
            continue
        ended = row["ended"] if row["ended"] is not None else now.timestamp()
        overlap = min(ended, closes) - max(row["started"], opens)
        if overlap <= 0:
            continue
        idle += row["idle_seconds"]  # that day's, of a session that ran during the lab
        if row["uid"] not in seen:
            seen.add(row["uid"])
            used += overlap * row["count"]
    booked = booking.demand * (end - start + warmup).total_seconds()

    def hours(seconds: float) -> float:
        return round(seconds / 3600, 2)

    return {
        "lab": index,
        "start": start.isoformat(),
        "end": end.isoformat(),
        "over": now >= end,
        "expected": booking.students,
        "started": started,
        "still_waiting": waiting,
        "never_started": sorted(set(members) - set(started) - set(waiting)),
        "seconds_to_ready": {"p50": _round(percentile(waits, 50)), "p95": _round(percentile(waits, 95)), "measured": len(waits)},
        "gpu_hours": {"used": hours(used), "booked": hours(booked), "held_idle": hours(idle) if counts_idle else None},
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
