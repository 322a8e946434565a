"""The admin API of GPU usage and budgets, served by the ``gpuburst`` service (admins only).

URLs, under the service's prefix ``/services/gpuburst/``, all with the capacity page's scope:

- ``GET api/usage?period=day|week|month|semester&date=YYYY-MM-DD&by=user,site``: GPU-hours by
  any of user, group, profile, site, resource, mode, day (default: this week, by user)
- ``GET api/usage.csv?period=...&date=...``: the same period as CSV, one line per day, user,
  profile, site, GPU resource and mode
- ``GET api/budgets``: every budget and what is left of it this period
- ``POST api/budgets/grants`` ``{"user": name, "hours": 5}`` (or ``"group"``): more GPU-hours
  for this period only
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

from tornado import web

from jupyter_gpuburst.hub.accounting.periods import PeriodError, parse_period
from jupyter_gpuburst.hub.accounting.report import ReportError, parse_by, usage_csv, usage_report
from jupyter_gpuburst.hub.accounting.settings import EVERYONE

USAGE_PATH = "api/usage"
CSV_PATH = "api/usage.csv"
BUDGETS_PATH = "api/budgets"
GRANTS_PATH = "api/budgets/grants"
MAX_GRANT_HOURS = 10_000.0


def handlers(prefix: str, base: type) -> list[tuple[str, type]]:
    """The handlers, on ``base``: the service's admin-authenticated handler class."""

    class _Accounting(base):  # type: ignore[misc, valid-type]
        def get_login_url(self) -> str:
            raise web.HTTPError(403, "GPU usage is for the hub's admins; a token with the admin:users scope is needed")

        def write_error(self, status_code: int, **kwargs: Any) -> None:
            exc = kwargs.get("exc_info", (None, None, None))[1]
            message = exc.log_message if isinstance(exc, web.HTTPError) and exc.log_message else "GPU usage failed; the hub's log says why"
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps({"status": status_code, "message": message}))

        async def accounting(self) -> Any:
            tracker = await self.tracker()
            found = getattr(tracker, "accounting", None)
            if found is None:
                raise web.HTTPError(404, "GPU accounting is off on this hub (c.GPUAccountingSettings.enabled)")
            return found

        def period(self, accounting: Any) -> Any:
            today = dt.datetime.fromtimestamp(accounting.ledger.clock(), dt.UTC).date()
            kind = self.get_argument("period", "week")
            try:
                return parse_period(kind, self.get_argument("date", None), accounting.budgets.semesters, today)
            except PeriodError as exc:
                raise web.HTTPError(400, str(exc)) from None

    class UsageHandler(_Accounting):
        @web.authenticated
        async def get(self) -> None:
            accounting = await self.accounting()
            period = self.period(accounting)
            try:
                by = parse_by(self.get_argument("by", None))
            except ReportError as exc:
                raise web.HTTPError(400, str(exc)) from None
            rows = accounting.ledger.usage_rows(period.first.isoformat(), period.last.isoformat())
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps(usage_report(rows, period, by, accounting.ledger.counts_idle)))

    class UsageCSVHandler(_Accounting):
        @web.authenticated
        async def get(self) -> None:
            accounting = await self.accounting()
            period = self.period(accounting)
            rows = accounting.ledger.usage_rows(period.first.isoformat(), period.last.isoformat())
            name = f"gpu-usage-{period.kind}-{(period.name or period.first.isoformat()).replace(' ', '-')}.csv"
            self.set_header("Content-Type", "text/csv; charset=utf-8")
            self.set_header("Content-Disposition", f'attachment; filename="{_safe_filename(name)}"')
            self.finish(usage_csv(rows, accounting.ledger.counts_idle))

    class BudgetsHandler(_Accounting):
        @web.authenticated
        async def get(self) -> None:
            accounting = await self.accounting()
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps(budgets_report(accounting)))

    class GrantsHandler(_Accounting):
        @web.authenticated
        async def post(self) -> None:
            accounting = await self.accounting()
            scope, name, hours = parse_grant(self.request.body)
            if scope == "user" and name not in accounting.settings.user_budgets and EVERYONE not in accounting.settings.user_budgets:
                raise web.HTTPError(400, f"user {name!r} has no GPU-hour budget to add to")
            if scope == "group" and name not in accounting.settings.group_budgets:
                raise web.HTTPError(400, f"group {name!r} has no GPU-hour budget to add to")
            admin = (self.current_user or {}).get("name", "")
            try:
                status = accounting.budgets.grant(scope, name, hours, admin)
            except PeriodError as exc:
                raise web.HTTPError(400, str(exc)) from None
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps({"granted_hours": hours, "budget": status.as_dict() if status else None}))

    return [
        (rf"{prefix}{CSV_PATH}", UsageCSVHandler),
        (rf"{prefix}{USAGE_PATH}/?", UsageHandler),
        (rf"{prefix}{GRANTS_PATH}/?", GrantsHandler),
        (rf"{prefix}{BUDGETS_PATH}/?", BudgetsHandler),
    ]


def parse_grant(body: bytes) -> tuple[str, str, float]:
    """``{"user": "alice", "hours": 5}`` -> ("user", "alice", 5.0); 400 with the reason otherwise."""
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        raise web.HTTPError(400, 'a grant is JSON: {"user": "alice", "hours": 5}') from None
    if not isinstance(data, dict) or len({"user", "group"} & set(data)) != 1:
        raise web.HTTPError(400, 'a grant names one "user" or one "group", and "hours"')
    scope = "user" if "user" in data else "group"
    name, hours = data[scope], data.get("hours")
    if not isinstance(name, str) or not name:
        raise web.HTTPError(400, f"{scope} must be a name")
    if isinstance(hours, bool) or not isinstance(hours, int | float) or not math.isfinite(hours) or not 0 < hours <= MAX_GRANT_HOURS:
        raise web.HTTPError(400, f"hours must be a number of GPU-hours above 0 and at most {MAX_GRANT_HOURS:g}, not {hours!r}")
    return scope, name, float(hours)


def budgets_report(accounting: Any) -> dict[str, Any]:
    """Every configured budget and what is left of it: users named, users who used GPUs this
    period under the everyone budget, and groups."""
    budgets = accounting.budgets
    settings = accounting.settings
    period = budgets.period(budgets.today())
    out: dict[str, Any] = {"period": period.as_dict() if period else None, "users": [], "groups": []}
    if period is None:
        return out
    users = {u for u in settings.user_budgets if u != EVERYONE}
    if EVERYONE in settings.user_budgets:
        users |= {r["user"] for r in accounting.ledger.usage_rows(period.first.isoformat(), period.last.isoformat())}
    for user in sorted(users):
        status = next((s for s in budgets.statuses(user, []) if s.scope == "user"), None)
        if status is not None:
            out["users"].append(status.as_dict())
    for group in sorted(settings.group_budgets):
        status = next((s for s in budgets.statuses("", [group]) if s.scope == "group"), None)
        if status is not None:
            out["groups"].append(status.as_dict())
    return out


def _safe_filename(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name)
