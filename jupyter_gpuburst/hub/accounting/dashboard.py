"""What the capacity page shows of GPU usage: this week's top users, donors' lent hours, budgets."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from jupyter_gpuburst.hub.accounting.handlers import CSV_PATH, budgets_report
from jupyter_gpuburst.hub.accounting.periods import period_of
from jupyter_gpuburst.hub.accounting.report import usage_report

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
        "csv": {kind: f"{csv}?period={kind}" for kind in ("day", "week", "month")},
    }
