"""What the capacity page shows of GPU usage: this week's top users, donors' lent hours, budgets."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from jupyter_gpuburst.hub.accounting.handlers import CSV_PATH, budgets_report
from jupyter_gpuburst.hub.accounting.periods import period_of
from jupyter_gpuburst.hub.accounting.report import usage_report

TOP_USERS = 10
DAY_S = 86400.0
CHART_W, CHART_H = 300, 60
PAD = 2  # keeps a line at 0 or at the top inside the box
SERIES = ("total", "in_use", "reserved")
log = logging.getLogger(__name__)


def usage_panel(tracker: Any, service_prefix: str) -> dict[str, Any] | None:
    """The page's usage section, or None when accounting is off (or cannot be read now)."""
    accounting = getattr(tracker, "accounting", None)
    if accounting is None:
        return None
    try:
        today = dt.datetime.fromtimestamp(accounting.ledger.clock(), dt.UTC).date()
        week = period_of("week", today)
        rows = accounting.ledger.usage_rows(week.first.isoformat(), week.last.isoformat())
        report = usage_report(rows, week, ("user",), accounting.ledger.counts_idle)
        budgets = budgets_report(accounting) if accounting.settings.has_budgets else None
        now = accounting.ledger.clock()
        # the stored samples (every 5 minutes), then this moment's: "now" is now, not the last sample
        charts = day_charts(accounting.ledger.store.samples(now - DAY_S) + accounting.ledger.capacity_now(), now)
    except Exception:  # the page still shows capacity when the ledger cannot be read
        log.exception("Could not read GPU usage for the capacity page")
        return None
    csv = f"{service_prefix}{CSV_PATH}"
    return {
        "period": week.as_dict(),
        "total": report["total"],
        "top_users": report["rows"][:TOP_USERS],
        "donors": report["donors"],
        "counts_idle": report["counts_idle"],
        "budgets": budgets,
        "charts": charts,
        "csv": {kind: f"{csv}?period={kind}" for kind in ("day", "week", "month")},
    }


def day_charts(samples: list[tuple[float, str, str, int, int, int]], now: float) -> list[dict[str, Any]]:
    """Per site and GPU resource, the last 24 hours of total / in use / reserved as SVG
    polyline points (x: time, y: GPUs, on a ``CHART_W`` x ``CHART_H`` box), and the latest."""
    by_series: dict[tuple[str, str], list[tuple[float, int, int, int]]] = {}
    for t, site, resource, total, in_use, reserved in samples:
        points = by_series.setdefault((site, resource), [])
        if points and points[-1][0] >= t:
            points.pop()  # one point per moment: the later reading of it wins
        points.append((t, total, in_use, reserved))
    charts = []
    for (site, resource), points in sorted(by_series.items(), key=lambda item: (item[0][0] != "origin", item[0])):
        top = max(max(p[1:]) for p in points) or 1

        def line(index: int, points: list[tuple[float, int, int, int]] = points, top: int = top) -> str:
            return " ".join(
                f"{CHART_W * max(0.0, (t - (now - DAY_S)) / DAY_S):.1f},{CHART_H - PAD - (CHART_H - 2 * PAD) * values[index - 1] / top:.1f}"
                for t, *values in points
            )

        latest = points[-1]
        charts.append(
            {
                "site": site,
                "resource": resource,
                "max": top,
                "lines": {name: line(i) for i, name in enumerate(SERIES, start=1)},
                "now": dict(zip(SERIES, latest[1:], strict=True)),
                "samples": len(points),
            }
        )
    return charts


def donor_rows(lent: list[dict[str, Any]], peered: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each donor's lent GPU-hours this week (``lent``: the usage report's donors) beside its
    health now as the capacity tracker sees it (``peered``: the capacity report's donors: its
    Liqo virtual node Ready and eligible), with no Kubernetes read of its own. A donor that
    lent nothing is listed with 0; one that lent but is no longer peered says so."""
    health = {d["site"]: d for d in peered}
    rows = []
    for site in sorted({*(r["site"] for r in lent), *health}):
        row = next((r for r in lent if r["site"] == site), None)
        known = health.get(site)
        rows.append(
            {
                "site": site,
                "gpu_hours": row["gpu_hours"] if row else 0.0,
                "sessions": row["sessions"] if row else 0,
                "peered": known is not None,
                "ready": bool(known and known["ready"]),
                "nodes_eligible": known["nodes_eligible"] if known else 0,
                "nodes_present": known["nodes_present"] if known else 0,
            }
        )
    return rows
