"""A lab book on a stand-in hub for the lab report's tests: one ML-101 lab on 3 December 2026,
10:00-11:00 UTC, booked by tina on 1 December, on a clock the test moves."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from types import SimpleNamespace

from jupyter_gpuburst.hub.labs.book import LabBook
from jupyter_gpuburst.hub.labs.settings import LabSettings
from jupyter_gpuburst.hub.labs.store import LabStore

UTC = dt.UTC
GPU = "nvidia.com/gpu"
BOOKED_AT = dt.datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
CLASS = frozenset({"ml-101"})


def at(hh: int, mm: int, ss: int = 0) -> float:
    """The lab's day at hh:mm:ss UTC, as a timestamp."""
    return dt.datetime(2026, 12, 3, hh, mm, ss, tzinfo=UTC).timestamp()


def open_book(path: Path, mode: str, members: list[str]) -> LabBook:
    """The book kept at ``path`` (a second call reopens it, as a restarted hub does), with the
    lab booked in ``mode`` for the class ``members``; ``book.clock_at["now"]`` is its clock."""
    clock = {"now": BOOKED_AT.timestamp()}
    site = SimpleNamespace(total=lambda resource: SimpleNamespace(allocatable=4 if resource == GPU else 0))
    book = LabBook(
        LabStore(path),
        LabSettings(warmup_minutes=15.0),
        UTC,
        {"gpu1": (GPU, 1)},
        lambda: ["ml-101"],
        lambda: SimpleNamespace(sites={"origin": site}),
        clock=lambda: clock["now"],
        kernel_profiles={"gpu-1": (GPU, 1)},
    )
    book.sources["members"] = lambda group: list(members)
    book.clock_at = clock
    if not book.bookings():
        profile = "gpu-1" if mode == "kernel" else "gpu1"
        body = {"title": "ML-101", "group": "ml-101", "profile": profile, "mode": mode, "students": len(members)}
        book.save({**body, "start": "2026-12-03T10:00", "end": "11:00"}, "tina")
    return book


def report_at(book: LabBook, when: float) -> dict:
    """The lab's report as the teacher reads it at ``when``."""
    book.clock_at["now"] = when
    return book.report(book.bookings()[0].id)
