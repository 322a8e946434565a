"""When a warm pool is up: the admin's windows (``"mon-fri 08:30-09:15"``) in the hub's time zone.

A pool holds GPUs for nobody while it waits, so an admin keeps it only around lab starts; the
windows say when, and the pools fill before a window opens only as fast as images pull, so a
window opens some minutes before the lab (docs/warm-pools.md says how many).
"""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo
from collections.abc import Iterable
from dataclasses import dataclass

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
EVERY_DAY = frozenset(range(7))
_WINDOW = re.compile(r"^(?:(?P<days>\S+)\s+)?(?P<start>\d{1,2}:\d{2})-(?P<end>\d{1,2}:\d{2})$")


@dataclass(frozen=True)
class Window:
    """Open from ``start`` to ``end`` (minutes after midnight) on ``days`` (``weekday()``
    numbers of the day it opens); an ``end`` at or before ``start`` closes the next day."""

    days: frozenset[int]
    start: int
    end: int
    text: str

    def is_open(self, when: dt.datetime) -> bool:
        minute = when.hour * 60 + when.minute
        today, yesterday = when.weekday(), (when.weekday() - 1) % 7
        if self.start < self.end:
            return today in self.days and self.start <= minute < self.end
        return (today in self.days and minute >= self.start) or (yesterday in self.days and minute < self.end)

    def edges(self, day: dt.datetime) -> list[dt.datetime]:
        """Where it opens and closes, for the window opening on ``day`` (midnight)."""
        if day.weekday() not in self.days:
            return []
        opens = day + dt.timedelta(minutes=self.start)
        closes = day + dt.timedelta(minutes=self.end + (0 if self.start < self.end else 24 * 60))
        return [opens, closes]


def parse_window(text: str) -> Window:
    """``"[days] HH:MM-HH:MM"``, days ``mon-fri``, ``mon,wed``, ``daily`` or left out (every
    day); ValueError with a short reason."""
    if not isinstance(text, str):
        raise ValueError(f"{text!r} is not a string like 'mon-fri 08:30-09:15'")
    match = _WINDOW.match(text.strip().lower())
    if not match:
        raise ValueError(f"{text!r} is not like 'mon-fri 08:30-09:15'")
    start, end = _minutes(match["start"], text), _minutes(match["end"], text)
    if start == end:
        raise ValueError(f"{text!r} opens and closes at the same time")
    return Window(_days(match["days"], text), start, end, text.strip())


def _minutes(hhmm: str, text: str) -> int:
    hours, minutes = (int(v) for v in hhmm.split(":"))
    if hours > 23 or minutes > 59:
        raise ValueError(f"{text!r}: {hhmm} is not a time of day")
    return hours * 60 + minutes


def _days(spec: str | None, text: str) -> frozenset[int]:
    if spec in (None, "daily", "*"):
        return EVERY_DAY
    days: set[int] = set()
    for part in spec.split(","):
        first, _, last = part.partition("-")
        if first not in DAYS or (last and last not in DAYS):
            bad = first if first not in DAYS else last
            raise ValueError(f"{text!r}: unknown day {bad!r} (mon, tue, wed, thu, fri, sat, sun)")
        i, j = DAYS.index(first), DAYS.index(last or first)
        days.update((i + k) % 7 for k in range((j - i) % 7 + 1))  # "sat-mon" wraps
    return frozenset(days)


def time_zone(name: str) -> dt.tzinfo:
    """The zone ``name`` (IANA, e.g. ``Europe/Rome``); ValueError with a short reason."""
    if name.upper() == "UTC":
        return dt.timezone.utc  # without a tz database too
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown time zone {name!r} (an IANA name like 'Europe/Rome'; the hub's Python needs tzdata)") from None


def is_open(windows: Iterable[Window], when: dt.datetime) -> bool:
    """No windows: always open."""
    windows = tuple(windows)
    return not windows or any(w.is_open(when) for w in windows)


def next_change(windows: Iterable[Window], when: dt.datetime) -> dt.datetime | None:
    """When the pool next opens (closed now) or closes (open now); None without windows or
    when it never changes (windows that cover the whole week)."""
    windows = tuple(windows)
    if not windows:
        return None
    now_open = is_open(windows, when)
    midnight = when.replace(hour=0, minute=0, second=0, microsecond=0)
    # windows opening from yesterday (one may still be open) to a week ahead
    edges = sorted(edge for back in range(-1, 8) for w in windows for edge in w.edges(midnight + dt.timedelta(days=back)) if edge > when)
    return next((edge for edge in edges if is_open(windows, edge) != now_open), None)


def describe(windows: Iterable[Window], when: dt.datetime) -> str:
    """What the capacity page says: "on until 09:15" or "off until Mon 08:30"; "" without windows."""
    windows = tuple(windows)
    if not windows:
        return ""
    state = "on" if is_open(windows, when) else "off"
    change = next_change(windows, when)
    if change is None:
        return state
    same_day = change.date() == when.date()
    return f"{state} until {change.strftime('%H:%M') if same_day else change.strftime('%a %H:%M')}"
