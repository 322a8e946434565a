"""A booking request read and judged: each refusal is one sentence, and changes nothing."""

from __future__ import annotations

import datetime as dt
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jupyter_gpuburst.hub.labs import cost
from jupyter_gpuburst.hub.labs.model import CANCELLED, KERNEL, SERVER, Booking
from jupyter_gpuburst.hub.labs.settings import LabSettings

TITLE_MAX = 80
_SITE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?$")


class BookingError(ValueError):
    """Why a booking is refused, in one sentence for its teacher."""


@dataclass(frozen=True)
class Context:
    """What a booking is judged against."""

    now: dt.datetime
    tz: dt.tzinfo
    settings: LabSettings
    groups: frozenset[str]  # the hub's groups
    profiles: Mapping[str, tuple[str, int]]  # GPU profile slug -> (GPU resource, units per student)
    others: tuple[Booking, ...]  # every other booking
    totals: Callable[[str], Mapping[str, int]]  # GPU resource -> each site's granted units
    # GPU kernel profile slug -> (GPU resource, units per kernel), for labs in kernel mode
    kernel_profiles: Mapping[str, tuple[str, int]] = field(default_factory=dict)

    def offered(self, mode: str) -> Mapping[str, tuple[str, int]]:
        return self.kernel_profiles if mode == KERNEL else self.profiles

    @property
    def warmup(self) -> dt.timedelta:
        return dt.timedelta(minutes=self.settings.warmup_minutes)


def _text(body: Mapping[str, Any], name: str, limit: int = 200) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value.strip():
        raise BookingError(f"The booking needs a {name}.")
    if len(value) > limit:
        raise BookingError(f"The {name} is at most {limit} characters.")
    return value.strip()


def _moment(value: Any, name: str, tz: dt.tzinfo, day: dt.date | None = None) -> dt.datetime:
    """An ISO date and time (in ``tz`` when it names no offset), or "HH:MM" on ``day``."""
    if not isinstance(value, str):
        raise BookingError(f"The {name} must be a date and time like 2026-12-07T10:00.")
    try:
        if day is not None and re.fullmatch(r"\d{1,2}:\d{2}", value.strip()):
            moment = dt.datetime.combine(day, dt.time.fromisoformat(value.strip().zfill(5)))
        else:
            moment = dt.datetime.fromisoformat(value.strip())
    except ValueError:
        raise BookingError(f"The {name} {value[:40]!r} is not a date and time like 2026-12-07T10:00.") from None
    return moment.replace(tzinfo=tz) if moment.tzinfo is None else moment


def _count(body: Mapping[str, Any], name: str, default: int | None, most: int) -> int:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise BookingError(f"The {name} must be a whole number from 1 to {most}.")
    return value


def parse(body: Mapping[str, Any], teacher: str, ctx: Context, booking_id: str, created: float) -> Booking:
    """The booking ``body`` asks for; BookingError for a malformed one."""
    title = _text(body, "title", TITLE_MAX)
    group = _text(body, "group")
    profile = _text(body, "profile")
    start = _moment(body.get("start"), "start", ctx.tz)
    end = _moment(body.get("end"), "end", ctx.tz, start.astimezone(ctx.tz).date())
    if end <= start:
        raise BookingError("The lab must end after it starts.")
    if end - start > dt.timedelta(hours=12):
        raise BookingError("A lab lasts at most 12 hours.")
    sites = body.get("sites") or []
    if not isinstance(sites, list) or not all(isinstance(s, str) and _SITE.match(s) for s in sites):
        raise BookingError('The preferred sites must be a list of site names like ["origin", "donor-1"].')
    mode = body.get("mode", SERVER)
    if mode not in (SERVER, KERNEL):
        raise BookingError(f'The mode must be "{SERVER}" (a GPU server per student) or "{KERNEL}" (GPU kernels of a CPU server).')
    resource, gpus = ctx.offered(mode).get(profile, ("", 0))
    return Booking(
        id=booking_id,
        title=title,
        teacher=teacher,
        group=group,
        profile=profile,
        resource=resource,
        gpus=gpus,
        students=_count(body, "students", None, ctx.settings.max_students),
        start=start,
        end=end,
        weeks=_count(body, "weeks", 1, ctx.settings.max_weeks),
        sites=tuple(dict.fromkeys(sites)),
        mode=mode,
    )


def judge(booking: Booking, ctx: Context) -> tuple[float, cost.CapacityCheck]:
    """(its GPU-hours, the capacity then) where it may be saved; else BookingError."""
    if booking.group not in ctx.groups:
        raise BookingError(f"There is no group {booking.group!r} on this hub.")
    kernel = booking.mode == KERNEL
    if booking.profile not in ctx.offered(booking.mode):
        offered = ", ".join(sorted(ctx.offered(booking.mode))) or "none"
        what = "GPU kernel profile" if kernel else "GPU profile"
        raise BookingError(f"There is no {what} {booking.profile!r} (offered: {offered}).")
    allowed = (ctx.settings.group_kernel_profiles if kernel else ctx.settings.group_profiles).get(booking.group)
    if allowed is not None and booking.profile not in allowed:
        what = "GPU kernel profile" if kernel else "profile"
        raise BookingError(
            f"The group {booking.group} may not use the {what} {booking.profile} (it may use: {', '.join(allowed) or 'none'})."
        )
    if booking.start <= ctx.now:
        raise BookingError(f"The lab would start in the past ({cost.when(booking.start, booking.end, ctx.tz)}).")
    others = [b for b in ctx.others if b.id != booking.id and b.status != CANCELLED]
    for other in others:
        if other.group == booking.group and cost.overlaps(booking.occurrences(), other.occurrences()):
            clash = next(o for o in other.occurrences() if any(o[0] < e and s < o[1] for s, e in booking.occurrences()))
            raise BookingError(f"{booking.group} already has a lab then: {other.title}, {cost.when(*clash, ctx.tz)}.")
    hours = cost.gpu_hours(booking, ctx.warmup)
    _within_limit(booking, others, ctx, "teacher")
    _within_limit(booking, others, ctx, "group")
    totals = ctx.totals(booking.resource)
    unknown = [site for site in booking.sites if site not in totals]
    if unknown:
        raise BookingError(f"There is no site {unknown[0]!r} (sites: {', '.join(sorted(totals)) or 'none'}).")
    check = cost.check_capacity(booking, others, totals, ctx.warmup, ctx.tz)
    if not check.fits:
        named = f" ({'; '.join(check.conflicts)})" if check.conflicts else ""
        raise BookingError(
            f"Not enough GPUs then: the class needs {check.needed} {booking.resource}, its sites have {check.total}"
            f" and other labs hold {check.booked}{named}."
        )
    return hours, check


def _within_limit(booking: Booking, others: Iterable[Booking], ctx: Context, kind: str) -> None:
    who = booking.teacher if kind == "teacher" else booking.group
    table = ctx.settings.teacher_weekly_hours if kind == "teacher" else ctx.settings.group_weekly_hours
    limit = ctx.settings.weekly_limit(table, who)
    if limit is None:
        return
    weeks: Counter[dt.date] = Counter()
    for other in others:
        if (other.teacher if kind == "teacher" else other.group) == who:
            weeks.update(cost.hours_by_week(other, ctx.warmup, ctx.tz))
    for monday, hours in sorted(cost.hours_by_week(booking, ctx.warmup, ctx.tz).items()):
        if weeks[monday] + hours > limit + 1e-9:
            subject = f"The bookings of {who}" if kind == "teacher" else f"The labs of the group {who}"
            raise BookingError(
                f"{subject} would take {weeks[monday] + hours:.1f} GPU-hours in the week of {monday.isoformat()},"
                f" over the limit of {limit:g} per week."
            )
