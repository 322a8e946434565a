"""What a booking costs in GPU-hours, and whether the federation has its GPUs then.

Pure: the capacity comes in as numbers (the GPUs each site is granted, from the capacity
tracker's snapshot), the other bookings as a list. A booking's window opens ``warmup`` before
each lab's start, when its pools fill, and closes at the lab's end.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from jupyter_gpuburst.hub.labs.model import CANCELLED, Booking


def windows(booking: Booking, warmup: dt.timedelta) -> list[tuple[dt.datetime, dt.datetime]]:
    return [(start - warmup, end) for start, end in booking.occurrences()]


def gpu_hours(booking: Booking, warmup: dt.timedelta) -> float:
    """Held over all its labs: the warm-up and the lab itself, every student's GPUs."""
    return sum((end - start).total_seconds() for start, end in windows(booking, warmup)) / 3600 * booking.demand


def hours_by_week(booking: Booking, warmup: dt.timedelta, tz: dt.tzinfo) -> Counter[dt.date]:
    """GPU-hours per week (its Monday, in ``tz``), each lab counted in the week it starts."""
    weeks: Counter[dt.date] = Counter()
    for start, end in windows(booking, warmup):
        local = start.astimezone(tz).date()
        weeks[local - dt.timedelta(days=local.weekday())] += (end - start).total_seconds() / 3600 * booking.demand
    return weeks


def overlaps(a: Iterable[tuple[dt.datetime, dt.datetime]], b: Iterable[tuple[dt.datetime, dt.datetime]]) -> bool:
    b = list(b)
    return any(s1 < e2 and s2 < e1 for s1, e1 in a for s2, e2 in b)


def shares_sites(a: Booking, b: Booking) -> bool:
    """Whether the two may hold the same GPUs (no preferred sites: any site)."""
    return not a.sites or not b.sites or bool(set(a.sites) & set(b.sites))


def when(start: dt.datetime, end: dt.datetime, tz: dt.tzinfo) -> str:
    """ "Mon 2026-12-07 10:00-12:00" in the pools' time zone."""
    s, e = start.astimezone(tz), end.astimezone(tz)
    return f"{s:%a %Y-%m-%d %H:%M}-{e:%H:%M}"


@dataclass(frozen=True)
class CapacityCheck:
    needed: int  # GPU units the class holds at once
    total: int  # GPU units of its resource the sites it may use are granted
    booked: int  # held by other bookings at the busiest of its labs
    conflicts: tuple[str, ...]  # those bookings, named

    @property
    def fits(self) -> bool:
        return self.needed <= self.total - self.booked

    def as_json(self) -> dict:
        return {
            "needed": self.needed,
            "total": self.total,
            "booked": self.booked,
            "left": self.total - self.booked,
            "fits": self.fits,
            "conflicts": list(self.conflicts),
        }


def site_totals(snapshot: object, resource: str) -> dict[str, int]:
    """Each site's granted units of ``resource`` (the origin's GPUs, each donor's grant)."""
    return {name: site.total(resource).allocatable for name, site in getattr(snapshot, "sites", {}).items()}


def check_capacity(
    booking: Booking, others: Iterable[Booking], totals: Mapping[str, int], warmup: dt.timedelta, tz: dt.tzinfo
) -> CapacityCheck:
    """The GPUs ``booking``'s sites have, less what overlapping bookings of the same resource
    hold, at the busiest of its labs."""
    total = sum(units for site, units in totals.items() if not booking.sites or site in booking.sites)
    busiest, conflicts = 0, []
    for start, end in windows(booking, warmup):
        held = 0
        for other in others:
            if (
                other.id == booking.id
                or other.status == CANCELLED
                or other.resource != booking.resource
                or not shares_sites(booking, other)
            ):
                continue
            clash = [w for w in windows(other, warmup) if w[0] < end and start < w[1]]
            if clash:
                held += other.demand
                line = f"{other.title} ({other.group}, {other.teacher}) holds {other.demand} {when(*clash[0], tz)}"
                if line not in conflicts:
                    conflicts.append(line)
        busiest = max(busiest, held)
    return CapacityCheck(booking.demand, total, busiest, tuple(conflicts))
