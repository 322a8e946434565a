"""The hub's lab book: bookings judged against the hub's groups, profiles and GPUs, saved, and
turned into the warm pools each active booking asks for (placeholders of a GPU server profile,
or pre-started kernels of a GPU kernel profile)."""

from __future__ import annotations

import datetime as dt
import secrets
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from jupyter_gpuburst.core.keys import ORIGIN_SITE
from jupyter_gpuburst.hub.labs import cost
from jupyter_gpuburst.hub.labs import report as lab_reports
from jupyter_gpuburst.hub.labs.model import APPROVED, CANCELLED, KERNEL, PENDING, Booking
from jupyter_gpuburst.hub.labs.settings import LabSettings
from jupyter_gpuburst.hub.labs.store import LabStore
from jupyter_gpuburst.hub.labs.validation import BookingError, Context, judge, parse

USE_FRESH_S = 1.0


class LabBook:
    def __init__(
        self,
        store: LabStore,
        settings: LabSettings,
        tz: dt.tzinfo,
        profiles: Mapping[str, tuple[str, int]],
        groups: Callable[[], Iterable[str]],
        snapshot: Callable[[], Any],
        clock: Callable[[], float] = time.time,
        class_use: Callable[[str, str], int] = lambda group, resource: 0,
        sources: Mapping[str, Callable[..., Any]] | None = None,
        kernel_profiles: Mapping[str, tuple[str, int]] | None = None,
    ) -> None:
        # GPU kernel profile slug -> (its GPU resource, units per kernel): what a lab in kernel mode books
        self.kernel_profiles = dict(kernel_profiles or {})
        # for reports: "usage"(group, first UTC day, last UTC day) -> the ledger's rows,
        # "members"(group) -> its users, "counts_idle"() -> whether the ledger counts idle time
        self.sources = {"usage": lambda *_: [], "members": lambda _group: [], "counts_idle": lambda: False, **(sources or {})}
        # (group, GPU resource) -> the units the group's members hold now: the part of a
        # lab's GPUs its students have taken, no longer held for them
        self.class_use = class_use
        # at a lab's rush every start and every spawn form asks what the class holds, and each
        # answer walks every pod: one walk serves them all for a second
        self._used: dict[tuple[str, str], tuple[float, int]] = {}
        self.store = store
        self.settings = settings
        self.tz = tz
        self.profiles = dict(profiles)
        self.groups = groups
        self.snapshot = snapshot
        self.clock = clock
        self._bookings = store.bookings()  # read again after each write of this process

    def now(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.clock(), self.tz)

    def bookings(self) -> list[Booking]:
        return list(self._bookings)

    def context(self, others: Iterable[Booking]) -> Context:
        snapshot = self.snapshot()
        return Context(
            now=self.now(),
            tz=self.tz,
            settings=self.settings,
            groups=frozenset(self.groups()),
            profiles=self.profiles,
            others=tuple(others),
            totals=lambda resource: cost.site_totals(snapshot, resource),
            kernel_profiles=self.kernel_profiles,
        )

    def preview(self, body: Mapping[str, Any], teacher: str) -> dict[str, Any]:
        """What saving ``body`` would cost and whether it fits: nothing is saved."""
        ctx = self.context(self._bookings)
        booking = parse(body, teacher, ctx, "preview", self.clock())
        out: dict[str, Any] = {"gpu_hours": round(cost.gpu_hours(booking, ctx.warmup), 2), "gpus": booking.demand}
        out["warmup_gpu_hours"] = round(booking.demand * booking.weeks * self.settings.warmup_minutes / 60, 2)
        if booking.resource:
            check = cost.check_capacity(booking, ctx.others, ctx.totals(booking.resource), ctx.warmup, self.tz)
            out["capacity"] = check.as_json()
        try:
            judge(booking, ctx)
            out["problem"] = None
        except BookingError as exc:
            out["problem"] = str(exc)
        out["approval"] = self.settings.require_approval
        return out

    def save(self, body: Mapping[str, Any], teacher: str) -> Booking:
        """The booking saved; BookingError (nothing saved) where it may not be."""
        status = PENDING if self.settings.require_approval else APPROVED

        def judged(others: list[Booking]) -> Booking:
            ctx = self.context(others)
            booking = parse(body, teacher, ctx, secrets.token_hex(6), self.clock())
            judge(booking, ctx)
            return replace(booking, status=status)

        booking = self.store.add(judged)
        self._bookings = self.store.bookings()
        return booking

    def set_status(self, booking_id: str, status: str) -> Booking:
        def change(booking: Booking) -> Booking:
            if booking.status == CANCELLED:
                raise BookingError(f"The lab {booking.title} was cancelled.")
            return replace(booking, status=status)

        try:
            booking = self.store.replace(booking_id, change)
        except KeyError:
            raise BookingError(f"There is no booking {booking_id!r}.") from None
        self._bookings = self.store.bookings()
        return booking

    def get(self, booking_id: str) -> Booking | None:
        return next((b for b in self._bookings if b.id == booking_id), None)

    # ---- what bookings do now ------------------------------------------------------------
    def active(self, when: dt.datetime) -> list[tuple[Booking, dt.datetime, dt.datetime]]:
        """Approved bookings whose window (warm-up included) is open at ``when``, with that lab's start and end."""
        warmup = dt.timedelta(minutes=self.settings.warmup_minutes)
        found = []
        for booking in self._bookings:
            if booking.status != APPROVED:
                continue
            for start, end in booking.occurrences():
                if start - warmup <= when < end:
                    found.append((booking, start, end))
        return found

    def goes_first(self, request: Any) -> bool:
        """Whether ``request`` (a ``GPURequest``) is a student's of a class whose lab is on now."""
        return any(b.group in request.groups and b.resource == request.resource for b, _s, _e in self.active(self.now()))

    def _class_use(self, group: str, resource: str) -> int:
        now = time.monotonic()
        seen = self._used.get((group, resource))
        if seen is None or now - seen[0] >= USE_FRESH_S:
            seen = self._used[(group, resource)] = (now, self.class_use(group, resource))
        return seen[1]

    def hold_for(self, request: Any) -> Any:
        """What is held now from ``request`` for labs of classes it is not in (a ``Hold``), or None."""
        from jupyter_gpuburst.hub.queue.classes import Hold

        units, sentences = 0, []
        for booking, _start, end in self.active(self.now()):
            if booking.group in request.groups or booking.resource != request.resource:
                continue
            held = max(0, booking.demand - self._class_use(booking.group, booking.resource))
            if held:
                units += held
                what = "GPU is" if held == 1 else "GPUs are"
                sentences.append(f"{held} {what} held for the lab {booking.title} until {end.astimezone(self.tz):%H:%M}.")
        return Hold(units, " ".join(sentences)) if units else None

    def report(self, booking_id: str, index: int | None = None) -> dict[str, Any]:
        """How the booking's lab ``index`` (default: the latest that has begun) went."""
        booking = self.get(booking_id)
        if booking is None:
            raise BookingError(f"There is no booking {booking_id!r}.")
        warmup, now = dt.timedelta(minutes=self.settings.warmup_minutes), self.now()
        if index is None:
            index = lab_reports.lab_index(booking, now, warmup)
            if index is None:
                raise BookingError(f"The lab {booking.title} has not begun yet.")
        if not 0 <= index < booking.weeks:
            raise BookingError(f"The lab {booking.title} has labs 0 to {booking.weeks - 1}.")
        start, end = booking.occurrences()[index]
        days = [(start - warmup).astimezone(dt.UTC).date().isoformat(), end.astimezone(dt.UTC).date().isoformat()]
        if booking.mode == KERNEL:
            # the CPU server's start says nothing of the GPU; the first GPU cell does
            rows = self.store.first_cells(booking.id, start.timestamp())
            measures, starts, waits = lab_reports.FIRST_GPU_CELL, rows, lab_reports.waits(rows)
        else:
            measures, starts, waits = lab_reports.server_timing(self.store.server_starts(booking.id, start.timestamp()))
        return lab_reports.lab_report(
            booking,
            index,
            starts,
            self.sources["usage"](booking.group, *days),
            self.sources["members"](booking.group),
            now,
            warmup,
            self.sources["counts_idle"](),
            measures,
            waits,
        )

    def note_start(self, user: str, groups: frozenset[str], asked: float, ready: float | None) -> None:
        """Keep a class's student's start for its lab's report (only during its lab)."""
        when = dt.datetime.fromtimestamp(asked, self.tz)
        for booking, start, _end in self.active(when):
            if booking.group in groups:
                self.store.note_start(booking.id, start.timestamp(), user, asked, ready)

    def note_kernel_asked(self, user: str, groups: frozenset[str], resource: str, asked: float) -> None:
        """Keep when a class's student first asked for a GPU kernel of its lab's GPUs (kernel mode, only during its lab)."""
        for booking, start, _end in self.active(dt.datetime.fromtimestamp(asked, self.tz)):
            if booking.mode == KERNEL and booking.group in groups and booking.resource == resource:
                self.store.note_kernel_asked(booking.id, start.timestamp(), user, asked)

    def note_first_cell(self, user: str, resource: str, ran: float) -> None:
        """Keep when a cell first ran on one of ``user``'s GPU kernels (of ``resource``), for
        the report of a kernel-mode lab on at that moment in which they asked for one."""
        for booking, start, _end in self.active(dt.datetime.fromtimestamp(ran, self.tz)):
            if booking.mode == KERNEL and booking.resource == resource:
                self.store.note_first_cell(booking.id, start.timestamp(), user, ran)

    def note_server_first_cell(self, user: str, resource: str, ran: float) -> None:
        """Keep when a cell first ran in ``user``'s GPU server (of ``resource``), for the report
        of a server-mode lab on at that moment in which they pressed Start."""
        for booking, start, _end in self.active(dt.datetime.fromtimestamp(ran, self.tz)):
            if booking.mode != KERNEL and booking.resource == resource:
                self.store.note_server_first_cell(booking.id, start.timestamp(), user, ran)

    def pools(self, when: dt.datetime) -> list[Any]:
        """A placeholder (in kernel mode: a pre-started kernel) per expected student, on the
        booking's preferred sites in order (the origin first, then donors, where it names none),
        as many on each as its GPUs allow."""
        # the pools import the spawner, which serves this package
        from jupyter_gpuburst.hub.pools.settings import KERNELS, PLACEHOLDERS, Pool

        totals_by_resource: dict[str, dict[str, int]] = {}
        counts: Counter[tuple[str, str, str]] = Counter()
        snapshot = self.snapshot()
        for booking, _start, _end in self.active(when):
            if not booking.gpus:
                continue
            totals = totals_by_resource.setdefault(booking.resource, cost.site_totals(snapshot, booking.resource))
            order = list(booking.sites) or sorted(totals, key=lambda s: (s != ORIGIN_SITE, s))
            kind = KERNELS if booking.mode == KERNEL else PLACEHOLDERS
            left = booking.students
            for site in order:
                fits = min(left, totals.get(site, 0) // booking.gpus)
                if fits > 0:
                    counts[(site, booking.profile, kind)] += fits
                    left -= fits
            if left > 0 and order:
                counts[(order[0], booking.profile, kind)] += left  # the pool says it ran short
        return [Pool(site, profile, count, kind) for (site, profile, kind), count in sorted(counts.items())]
