"""How a lab went, for its teacher: who started and how fast, GPU-hours used against booked,
held idle, and who was still waiting.

What the timing measures depends on the lab's mode, and the report says which (``measures``):

- server mode (``server_first_gpu_cell``): from the student's Start (the spawner notes it) to the
  first cell that ran in a kernel of their GPU server. The server's extension notes its first
  cell and passes its age on in its GPU activity reports (hub/culling), and the hub keeps the
  moment it works out.
- server mode, where no student's first cell was heard of (``server_ready``): from the Start to
  the moment the hub had heard their server answer and routed it (the spawner notes that too),
  and the sentence says so. That is when JupyterLab can open, not when a cell ran.
- kernel mode (``first_gpu_cell``): from the first GPU kernel the student asked for during the
  lab (the hub's kernel API notes the request) to the first cell that ran on one of their GPU
  kernels after it. The kernel's pod notes its first cell; the student's server passes its age
  on in its GPU activity reports (hub/culling), and the hub keeps the moment it works out.
  The CPU server's start is not timed: it says nothing of the GPU.

Pure: the times come from the lab book's store, the GPU-seconds from the GPU-hours ledger
(hub/accounting).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from jupyter_gpuburst.hub.labs.model import Booking

SERVER_READY, FIRST_GPU_CELL, SERVER_FIRST_GPU_CELL = "server_ready", "first_gpu_cell", "server_first_gpu_cell"
Timed = tuple[str, float, float | None]  # (user, asked, reached or None)


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


def waits(timed: Iterable[Timed]) -> list[float]:
    """Seconds from asked to reached, of those who reached it."""
    return [reached - asked for _user, asked, reached in timed if reached is not None]


def server_timing(rows: Iterable[tuple[str, float, float | None, float | None]]) -> tuple[str, list[Timed], list[float]]:
    """A server-mode lab's (measures, starts, waits) from its students' (user, asked, ready,
    first cell): Start to the first GPU cell where any was heard of, else Start to a ready server.
    A student started when their server was ready, or ran a cell in it (the hub may have missed
    the ready of a server it restarted during)."""
    rows = list(rows)
    starts = [(user, asked, ready if ready is not None else cell) for user, asked, ready, cell in rows]
    cells = [(user, asked, cell) for user, asked, _ready, cell in rows]
    if any(cell is not None for *_, cell in cells):
        return SERVER_FIRST_GPU_CELL, starts, waits(cells)
    return SERVER_READY, starts, waits(starts)


def lab_report(
    booking: Booking,
    index: int,
    starts: Iterable[Timed],
    usage: Iterable[Mapping[str, Any]],
    members: Iterable[str],
    now: dt.datetime,
    warmup: dt.timedelta,
    counts_idle: bool,
    measures: str,
    timed: Sequence[float],
) -> dict[str, Any]:
    """The report of the booking's lab ``index``. ``starts``: (user, asked, reached or None) of
    each student, who started and who still waits; ``measures`` and ``timed``: what was timed
    and each timed student's seconds, as the module docstring says; ``usage``: the ledger's
    rows (per session and day) of the class's sessions on the lab's days; ``members``: the
    class group's users."""
    start, end = booking.occurrences()[index]
    opens, closes = (start - warmup).timestamp(), min(end, now).timestamp()
    starts = list(starts)
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
    p50, p95 = _round(percentile(timed, 50)), _round(percentile(timed, 95))

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
        # seconds to a ready server or to a first GPU cell (see ``measures``)
        "seconds_to_ready": {"p50": p50, "p95": p95, "measured": len(timed)},
        "measures": measures,
        "timing": timing_sentence(measures, p50, p95),
        "gpu_hours": {"used": hours(used), "booked": hours(booked), "held_idle": hours(idle) if counts_idle else None},
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def timing_sentence(measures: str, p50: float | None, p95: float | None) -> str:
    """What the page says of the timing, naming what was timed."""
    if measures == FIRST_GPU_CELL:
        if p50 is None:
            return "No student ran a GPU cell."
        return f"From asking for a GPU kernel to its first cell: {_seconds(p50)} s for half of them, {_seconds(p95)} s for 95%."
    if measures == SERVER_FIRST_GPU_CELL:
        return f"From Start to the first GPU cell: {_seconds(p50)} s for half of them, {_seconds(p95)} s for 95%."
    if p50 is None:
        return "No student's server was ready."
    # no first cell was heard of: a server's cells reach the hub only with its activity reports
    return (
        f"From Start to a ready server (no student's first GPU cell was heard of): {_seconds(p50)} s for half of them, "
        f"{_seconds(p95)} s for 95%."
    )


def _seconds(value: float | None) -> str:
    return f"{value or 0:.1f}".removesuffix(".0")
