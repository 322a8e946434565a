"""A lab booking: who booked which class, when, for how many students of which profile."""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict, dataclass, field
from typing import Any

APPROVED, PENDING, CANCELLED = "approved", "pending", "cancelled"
# what each student of the lab holds: a GPU server, or GPU kernels of a CPU server (kernel mode)
SERVER, KERNEL = "server", "kernel"
WEEK = dt.timedelta(days=7)


@dataclass(frozen=True)
class Booking:
    """``weeks`` labs, a week apart, the first from ``start`` to ``end`` (aware datetimes);
    each student holds ``gpus`` units of ``resource`` (the profile's): of a GPU server profile,
    or (``mode`` KERNEL) of a GPU kernel profile, whose kernels the pools pre-start."""

    id: str
    title: str
    teacher: str
    group: str
    profile: str
    resource: str
    gpus: int
    students: int
    start: dt.datetime
    end: dt.datetime
    weeks: int = 1
    sites: tuple[str, ...] = ()
    status: str = APPROVED
    mode: str = SERVER
    created: float = 0.0
    notes: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def demand(self) -> int:
        """The GPU units the class holds at once."""
        return self.gpus * self.students

    def occurrences(self) -> list[tuple[dt.datetime, dt.datetime]]:
        return [(self.start + k * WEEK, self.end + k * WEEK) for k in range(self.weeks)]

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.update(start=self.start.isoformat(), end=self.end.isoformat(), sites=list(self.sites))
        data.pop("notes")
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Booking:
        values = dict(data)
        values.update(
            start=dt.datetime.fromisoformat(data["start"]), end=dt.datetime.fromisoformat(data["end"]), sites=tuple(data.get("sites") or ())
        )
        values.pop("notes", None)
        return cls(**values)
