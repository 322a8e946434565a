"""What the capacity page shows of GPU usage: this week's top users, donors' lent hours, budgets,
the 24-hour charts, and the profiles whose sessions use a small share of what they hold."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from jupyter_gpuburst.hub.accounting.daychart import DAY_S, day_charts
from jupyter_gpuburst.hub.accounting.handlers import CSV_PATH, budgets_report
from jupyter_gpuburst.hub.accounting.periods import period_of
from jupyter_gpuburst.hub.accounting.report import usage_report
from jupyter_gpuburst.hub.accounting.rightsizing import oversized_for

__all__ = ["day_charts", "usage_panel"]
TOP_USERS = 10
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
        oversized = right_sizing_panel(tracker)
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
        "right_sizing": oversized,
        "csv": {kind: f"{csv}?period={kind}" for kind in ("day", "week", "month")},
    }


def right_sizing_panel(tracker: Any) -> dict[str, Any]:
    """The profiles whose sessions use a small share of what they hold, and what "small" is."""
    settings = tracker.accounting.settings
    return {
        "profiles": oversized_for(tracker) or [],
        "small_share": settings.right_sizing_small_share,
        "days": settings.right_sizing_days,
        "min_sessions": max(1, settings.right_sizing_sessions),
    }


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
