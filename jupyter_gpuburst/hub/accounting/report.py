"""GPU-hours reports for admins: totals by user, group, profile, site, resource, mode or day, and CSV."""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from jupyter_gpuburst.core import keys
from jupyter_gpuburst.hub.accounting.periods import Period

HOUR = 3600.0
DIMENSIONS = ("user", "group", "profile", "site", "resource", "mode", "day")
NO_GROUP = "(no group)"
CSV_FIELDS = (
    "day",
    "user",
    "groups",
    "profile",
    "site",
    "site_kind",
    "resource",
    "mode",
    "sessions",
    "gpu_hours",
    "idle_gpu_hours",
    "peak_gpu_memory_gib",
    "peak_gpu_utilization",
    "mean_gpu_utilization",
)
GIB = 2.0**30


class ReportError(ValueError):
    """A report that cannot be made as asked; the message is short and safe to show."""


def parse_by(raw: str | None) -> tuple[str, ...]:
    """``by=user,site`` -> ("user", "site"); default: by user."""
    fields = tuple(f.strip() for f in (raw or "user").split(",") if f.strip())
    unknown = [f for f in fields if f not in DIMENSIONS]
    if unknown or not fields:
        raise ReportError(f"cannot group GPU usage by {', '.join(unknown) or 'nothing'}; group by any of {', '.join(DIMENSIONS)}")
    return fields


def _values(row: Mapping[str, Any], field: str) -> list[str]:
    if field == "group":
        return list(row["groups"]) or [NO_GROUP]
    return [str(row[field])]


def use_figures(rows: Iterable[Mapping[str, Any]]) -> dict[str, float | None]:
    """What the sessions of ``rows`` used of their GPUs: the highest peak memory (GiB) and
    utilization of any, and the mean utilization over all their samples (None: not measured).
    A session's figures are on each of its days' rows: each session counts once."""
    sessions = {row["uid"]: row for row in rows}.values()
    peaks = [r["peak_memory_bytes"] for r in sessions if r.get("peak_memory_bytes") is not None]
    utils = [r["peak_utilization"] for r in sessions if r.get("peak_utilization") is not None]
    total = sum(r.get("utilization_sum") or 0.0 for r in sessions)
    samples = sum(r.get("utilization_samples") or 0 for r in sessions)
    return {
        "peak_gpu_memory_gib": round(max(peaks) / GIB, 3) if peaks else None,
        "peak_gpu_utilization": round(max(utils), 4) if utils else None,
        "mean_gpu_utilization": round(total / samples, 4) if samples else None,
    }


def summarize(rows: Iterable[Mapping[str, Any]], by: tuple[str, ...], counts_idle: bool) -> list[dict[str, Any]]:
    """GPU-hours per combination of ``by``; biggest first. A session of a user in two groups
    counts in full for each group (group totals add up to more than the hub's total)."""
    sums: dict[tuple[str, ...], list[Any]] = defaultdict(lambda: [0.0, 0.0, set(), []])
    for row in rows:
        combos: list[tuple[str, ...]] = [()]
        for field in by:
            combos = [c + (v,) for c in combos for v in _values(row, field)]
        for combo in combos:
            entry = sums[combo]
            entry[0] += row["gpu_seconds"]
            entry[1] += row["idle_seconds"]
            entry[2].add(row["uid"])
            entry[3].append(row)
    out = []
    for combo, (gpu, idle, sessions, members) in sums.items():
        item: dict[str, Any] = dict(zip(by, combo, strict=True))
        item["gpu_hours"] = round(gpu / HOUR, 4)
        item["idle_gpu_hours"] = round(idle / HOUR, 4) if counts_idle else None
        item["sessions"] = len(sessions)
        item.update(use_figures(members))
        out.append(item)
    out.sort(key=lambda i: (-i["gpu_hours"], [i[f] for f in by]))
    return out


def usage_report(rows: list[dict[str, Any]], period: Period, by: tuple[str, ...], counts_idle: bool) -> dict[str, Any]:
    """The JSON admins get: the period, the rows by ``by``, the total, and each donor's lent hours."""
    gpu = sum(r["gpu_seconds"] for r in rows)
    idle = sum(r["idle_seconds"] for r in rows)
    return {
        "period": period.as_dict(),
        "by": list(by),
        "counts_idle": counts_idle,
        "total": {
            "gpu_hours": round(gpu / HOUR, 4),
            "idle_gpu_hours": round(idle / HOUR, 4) if counts_idle else None,
            "sessions": len({r["uid"] for r in rows}),
            **use_figures(rows),
        },
        "rows": summarize(rows, by, counts_idle),
        # what each donor lent: GPU-hours of the hub's pods on it
        "donors": summarize([r for r in rows if r["site"] != keys.ORIGIN_SITE], ("site",), counts_idle),
    }


def usage_csv(rows: list[dict[str, Any]], counts_idle: bool) -> str:
    """One line per day, user, profile, site, GPU resource and mode (spreadsheets sum them)."""
    sums: dict[tuple[Any, ...], list[Any]] = defaultdict(lambda: [0.0, 0.0, set(), []])
    for row in rows:
        key = (row["day"], row["user"], ";".join(row["groups"]), row["profile"], row["site"], row["resource"], row["mode"])
        entry = sums[key]
        entry[0] += row["gpu_seconds"]
        entry[1] += row["idle_seconds"]
        entry[2].add(row["uid"])
        entry[3].append(row)
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_FIELDS)
    for key in sorted(sums):
        gpu, idle, sessions, members = sums[key]
        day, user, groups, profile, site, resource, mode = key
        use = use_figures(members)
        kind = "origin" if site == keys.ORIGIN_SITE else "donor"
        writer.writerow(
            [
                day,
                _cell(user),
                _cell(groups),
                _cell(profile),
                _cell(site),
                kind,
                resource,
                mode,
                len(sessions),
                f"{gpu / HOUR:.4f}",
                f"{idle / HOUR:.4f}" if counts_idle else "",
                *("" if use[name] is None else f"{use[name]:g}" for name in CSV_FIELDS[-3:]),
            ]
        )
    return out.getvalue()


def _cell(value: str) -> str:
    """A spreadsheet must not run a username as a formula (CSV injection)."""
    return f"'{value}" if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value
