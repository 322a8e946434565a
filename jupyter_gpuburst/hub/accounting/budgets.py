"""GPU-hour budgets: what is left to a user this period, said in one sentence, and the refusal."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from jupyter_gpuburst.hub.accounting.ledger import UsageLedger
from jupyter_gpuburst.hub.accounting.periods import Period, PeriodError, parse_semesters, period_of
from jupyter_gpuburst.hub.accounting.settings import EVERYONE, GPUAccountingSettings

HOUR = 3600.0


@dataclass(frozen=True)
class BudgetStatus:
    """One budget that applies to a user: theirs, or one of their groups' together."""

    scope: str  # "user" or "group"
    name: str
    hours: float  # the budget, grants included
    used_hours: float
    period: Period
    today: dt.date

    @property
    def left_hours(self) -> float:
        return max(0.0, self.hours - self.used_hours)

    @property
    def exhausted(self) -> bool:
        return self.used_hours >= self.hours

    def sentence(self) -> str:
        """ "7.5 of 20 GPU-hours left this week, resets Monday 00:00 UTC"."""
        whose = "" if self.scope == "user" else f" for group {self.name}"
        return f"{_hours(self.left_hours)} of {_hours(self.hours)} GPU-hours left{whose} {self.period.label}, {self.period.resets_text(self.today)}"

    def refusal(self) -> str:
        return f"Your GPU-hour budget is used up: {self.sentence()}. Ask the hub's admins for more."

    def as_dict(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "name": self.name,
            "hours": round(self.hours, 3),
            "used_hours": round(self.used_hours, 3),
            "left_hours": round(self.left_hours, 3),
            "period": self.period.as_dict(),
            "resets_at": self.period.resets_at.isoformat(),
            "sentence": self.sentence(),
        }


class Budgets:
    """The configured budgets, read against the ledger (and admins' grants)."""

    def __init__(self, settings: GPUAccountingSettings, ledger: UsageLedger) -> None:
        self.settings = settings
        self.ledger = ledger
        self.semesters = parse_semesters(settings.semesters)

    def period(self, today: dt.date) -> Period | None:
        try:
            return period_of(self.settings.budget_period, today, self.semesters)
        except PeriodError:
            return None  # between semesters: no semester budget applies

    def today(self) -> dt.date:
        return dt.datetime.fromtimestamp(self.ledger.clock(), dt.UTC).date()

    def statuses(self, user: str, groups: Iterable[str]) -> list[BudgetStatus]:
        """Every budget that applies to ``user`` now, tightest first."""
        today = self.today()
        period = self.period(today)
        if period is None:
            return []
        first, last = period.first.isoformat(), period.last.isoformat()
        out = []
        hours = self.settings.user_budgets.get(user, self.settings.user_budgets.get(EVERYONE))
        if hours is not None:
            used = sum(r["gpu_seconds"] for r in self.ledger.usage_rows(first, last, user=user)) / HOUR
            granted = self.ledger.store.granted(f"user:{user}", period.key)
            out.append(BudgetStatus("user", user, hours + granted, used, period, today))
        for group in sorted(set(groups)):
            hours = self.settings.group_budgets.get(group)
            if hours is None:
                continue
            used = sum(r["gpu_seconds"] for r in self.ledger.usage_rows(first, last, group=group)) / HOUR
            granted = self.ledger.store.granted(f"group:{group}", period.key)
            out.append(BudgetStatus("group", group, hours + granted, used, period, today))
        return sorted(out, key=lambda s: s.left_hours)

    def tightest(self, user: str, groups: Iterable[str]) -> BudgetStatus | None:
        statuses = self.statuses(user, groups)
        return statuses[0] if statuses else None

    def grant(self, scope: str, name: str, hours: float, granted_by: str) -> BudgetStatus | None:
        """Give ``name`` (a user or a group) ``hours`` more this period."""
        period = self.period(self.today())
        if period is None:
            raise PeriodError("no budget period is running now (no semester contains today)")
        self.ledger.store.add_grant(f"{scope}:{name}", period.key, hours, granted_by, self.ledger.clock())
        statuses = self.statuses(name, [name]) if scope == "group" else self.statuses(name, [])
        return next((s for s in statuses if s.scope == scope and s.name == name), None)


def _hours(value: float) -> str:
    return f"{value:.1f}".removesuffix(".0")
