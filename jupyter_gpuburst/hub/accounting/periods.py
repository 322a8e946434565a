"""Accounting periods: a UTC day, an ISO week (Monday to Sunday), a month, or a named semester."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

KINDS = ("day", "week", "month", "semester")


class PeriodError(ValueError):
    """A period that does not exist; the message is short and safe to show."""


@dataclass(frozen=True)
class Period:
    kind: str
    first: dt.date
    last: dt.date
    name: str = ""

    @property
    def key(self) -> str:
        """Stable name of this period (what admins' grants are kept under)."""
        return f"{self.kind}:{self.name or self.first.isoformat()}"

    @property
    def label(self) -> str:
        return "this semester" if self.kind == "semester" else f"this {self.kind}"

    @property
    def resets_at(self) -> dt.datetime:
        return dt.datetime.combine(self.last + dt.timedelta(days=1), dt.time(), dt.UTC)

    def resets_text(self, today: dt.date) -> str:
        """When the budget starts again, as people say it: "Monday 00:00 UTC"."""
        reset = self.resets_at
        if self.kind == "semester":
            return f"ends {reset.date().isoformat()}"
        if (reset.date() - today).days <= 1:
            return "resets tomorrow 00:00 UTC"
        if (reset.date() - today).days <= 7:
            return f"resets {reset.strftime('%A')} 00:00 UTC"
        return f"resets {reset.date().isoformat()} 00:00 UTC"

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "first_day": self.first.isoformat(), "last_day": self.last.isoformat()}


def parse_semesters(raw: Sequence[Mapping[str, Any]]) -> list[Period]:
    """``[{"name": "Fall 2026", "start": "2026-09-01", "end": "2027-01-31"}, ...]``, checked."""
    out: list[Period] = []
    for item in raw:
        if not isinstance(item, Mapping) or not {"name", "start", "end"} <= set(item):
            raise PeriodError(f"a semester needs a name, a start and an end date (YYYY-MM-DD), not {item!r}")
        try:
            first, last = dt.date.fromisoformat(str(item["start"])), dt.date.fromisoformat(str(item["end"]))
        except ValueError:
            raise PeriodError(f"semester {item['name']!r}: dates are YYYY-MM-DD, not {item['start']!r} and {item['end']!r}") from None
        if last < first:
            raise PeriodError(f"semester {item['name']!r} ends ({last}) before it starts ({first})")
        out.append(Period("semester", first, last, str(item["name"])))
    out.sort(key=lambda p: p.first)
    for a, b in zip(out, out[1:], strict=False):
        if b.first <= a.last:
            raise PeriodError(f"semesters {a.name!r} and {b.name!r} overlap")
    return out


def period_of(kind: str, day: dt.date, semesters: Sequence[Period] = ()) -> Period:
    """The period of ``kind`` that ``day`` falls in."""
    if kind == "day":
        return Period("day", day, day)
    if kind == "week":
        first = day - dt.timedelta(days=day.weekday())
        return Period("week", first, first + dt.timedelta(days=6))
    if kind == "month":
        first = day.replace(day=1)
        following = (first + dt.timedelta(days=32)).replace(day=1)
        return Period("month", first, following - dt.timedelta(days=1))
    if kind == "semester":
        for semester in semesters:
            if semester.first <= day <= semester.last:
                return semester
        known = ", ".join(s.name for s in semesters) or "none is configured"
        raise PeriodError(f"no semester contains {day.isoformat()} (semesters: {known})")
    raise PeriodError(f"unknown period {kind!r}; expected one of {', '.join(KINDS)}")


def parse_period(kind: str, date_text: str | None, semesters: Sequence[Period], today: dt.date) -> Period:
    """A period from a request's ``period`` and ``date`` (any day in it; default today), or
    ``period=semester&name=...``."""
    for semester in semesters:
        if kind == "semester" and date_text == semester.name:
            return semester
    if date_text:
        try:
            day = dt.date.fromisoformat(date_text)
        except ValueError:
            raise PeriodError(f"date must be YYYY-MM-DD (or a semester's name), not {date_text!r}") from None
    else:
        day = today
    return period_of(kind, day, semesters)
