"""The capacity page's 24-hour chart of each site's GPUs: total, in use, reserved and idle, with
axes, and the same figures as a summary sentence and an hourly table for screen readers.

Samples are kept every 5 minutes (``ledger.sample``); each holds until the next, so the lines are
steps. The chart is SVG drawn by the page in the theme's colours (``gpuburst_day_chart.html``).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable
from typing import Any

DAY_S = 86400.0
HOUR_S = 3600.0
# the chart's box (SVG user units) and the room its axes take
WIDTH, HEIGHT = 640, 180
LEFT, RIGHT, TOP, BOTTOM = 40, 12, 10, 26
TIME_TICK_S = 6 * HOUR_S
SERIES = ("total", "in_use", "reserved", "idle")
LABELS = {"total": "total", "in_use": "in use", "reserved": "reserved by spawns starting", "idle": "held idle"}

Sample = tuple  # (t, site, resource, total, in_use, reserved[, idle or None])


def _clock(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%H:%M")


def gpu_ticks(top: int) -> tuple[int, list[int]]:
    """The GPU axis: its top (a multiple of the step, at least ``top``) and its ticks, at most 5."""
    top = max(1, top)
    step = max(1, math.ceil(top / 4))
    axis_top = math.ceil(top / step) * step
    return axis_top, list(range(0, axis_top + 1, step))


def _series(samples: list[tuple[float, dict[str, int | None]]], name: str, x: Any, y: Any, now: float) -> str:
    """An SVG path of steps: each sample's value holds until the next; unknown values are gaps."""
    parts: list[str] = []
    drawing = False
    for index, (t, values) in enumerate(samples):
        value = values.get(name)
        end = samples[index + 1][0] if index + 1 < len(samples) else now
        if value is None:
            drawing = False
            continue
        if not drawing:
            parts.append(f"M{x(t):.1f},{y(value):.1f}")
            drawing = True
        else:
            parts.append(f"V{y(value):.1f}")
        parts.append(f"H{x(max(t, end)):.1f}")
    return "".join(parts)


def day_charts(samples: Iterable[Sample], now: float) -> list[dict[str, Any]]:
    """Per site and GPU resource, the last 24 hours as what the page draws: the series' paths,
    the axes' ticks, a legend, the latest figures, a one-sentence summary and hourly rows."""
    start = now - DAY_S
    by_series: dict[tuple[str, str], list[tuple[float, dict[str, int | None]]]] = {}
    for row in samples:
        t, site, resource, total, in_use, reserved = row[:6]
        idle = row[6] if len(row) > 6 else None
        points = by_series.setdefault((site, resource), [])
        if points and points[-1][0] >= t:
            points.pop()  # one point per moment: the later reading of it wins
        points.append((max(t, start), {"total": total, "in_use": in_use, "reserved": reserved, "idle": idle}))
    charts = []
    for (site, resource), points in sorted(by_series.items(), key=lambda item: (item[0][0] != "origin", item[0])):
        charts.append(_chart(site, resource, points, now))
    return charts


def _chart(site: str, resource: str, points: list[tuple[float, dict[str, int | None]]], now: float) -> dict[str, Any]:
    start = now - DAY_S
    top = max((v for _, values in points for v in values.values() if v is not None), default=1)
    axis_top, gpu_axis = gpu_ticks(int(top))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def x(t: float) -> float:
        return LEFT + plot_w * min(1.0, max(0.0, (t - start) / DAY_S))

    def y(value: float) -> float:
        return TOP + plot_h * (1.0 - value / axis_top)

    first_tick = math.ceil(start / TIME_TICK_S) * TIME_TICK_S
    time_axis = [{"x": round(x(t), 1), "label": _clock(t)} for t in _range(first_tick, now, TIME_TICK_S) if x(t) < WIDTH - RIGHT - 30]
    time_axis.append({"x": round(x(now), 1), "label": "now"})
    knows_idle = any(values["idle"] is not None for _, values in points)
    shown = [name for name in SERIES if name != "idle" or knows_idle]
    latest = points[-1][1]
    return {
        "site": site,
        "resource": resource,
        "max": axis_top,
        "width": WIDTH,
        "height": HEIGHT,
        "plot": {"left": LEFT, "right": WIDTH - RIGHT, "top": TOP, "bottom": HEIGHT - BOTTOM},
        "paths": {name: _series(points, name, x, y, now) for name in shown},
        "gpu_axis": [{"y": round(y(v), 1), "label": str(v)} for v in gpu_axis],
        "time_axis": time_axis,
        "legend": [{"series": name, "label": LABELS[name]} for name in shown],
        "now": {name: latest[name] for name in shown},
        "summary": _summary(site, resource, points, shown),
        "hours": _hours(points, now, shown),
        "samples": len(points),
        "knows_idle": knows_idle,
    }


def _range(first: float, end: float, step: float) -> Iterable[float]:
    t = first
    while t < end:
        yield t
        t += step


def _summary(site: str, resource: str, points: list[tuple[float, dict[str, int | None]]], shown: list[str]) -> str:
    latest = points[-1][1]
    now = ", ".join(f"{latest[name] if latest[name] is not None else 'unknown'} {LABELS[name]}" for name in shown)
    busiest_t, busiest = max(points, key=lambda p: (p[1]["in_use"] or 0, p[0]))
    return (
        f"{site}, {resource}, last 24 hours: now {now}. Most in use: {busiest['in_use']} of {busiest['total']} at {_clock(busiest_t)} UTC."
    )


def _hours(points: list[tuple[float, dict[str, int | None]]], now: float, shown: list[str]) -> list[dict[str, Any]]:
    """Per UTC hour with samples, the most of each series during it (latest hour first)."""
    hours: dict[float, dict[str, int | None]] = {}
    for t, values in points:
        hour = math.floor(t / HOUR_S) * HOUR_S
        row = hours.setdefault(hour, {name: None for name in shown})
        for name in shown:
            value = values.get(name)
            if value is not None:
                row[name] = max(row[name] or 0, value)
    return [{"hour": _clock(hour), **row} for hour, row in sorted(hours.items(), reverse=True)]
