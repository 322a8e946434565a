"""During a lab its class goes first: ahead in the line, and its booked GPUs held from others."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace

import pytest

from jupyter_gpuburst.core.placement import GPURequest
from jupyter_gpuburst.hub.capacity.tracker import CapacityTracker
from jupyter_gpuburst.hub.labs.book import LabBook
from jupyter_gpuburst.hub.labs.settings import LabSettings
from jupyter_gpuburst.hub.labs.store import LabStore
from jupyter_gpuburst.hub.labs.validation import BookingError
from jupyter_gpuburst.hub.queue import classes
from jupyter_gpuburst.hub.settings import settings_from_config

UTC = dt.UTC
GPU = "nvidia.com/gpu"
BOOKED_AT = dt.datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
IN_LAB = dt.datetime(2026, 12, 3, 10, 30, tzinfo=UTC)


def federation():
    site = SimpleNamespace(total=lambda resource: SimpleNamespace(allocatable=4 if resource == GPU else 0))
    return SimpleNamespace(sites={"origin": site, "donor-1": site})


def request(user: str, *groups: str) -> GPURequest:
    return GPURequest(GPU, 1, user, frozenset(groups), "gpu1")


@pytest.fixture
def book():
    clock = {"now": BOOKED_AT.timestamp()}
    used = {"ml-101": 0}
    lab = LabBook(
        LabStore(":memory:"),
        LabSettings(warmup_minutes=15.0),
        UTC,
        {"gpu1": (GPU, 1)},
        lambda: ["ml-101", "cv-200"],
        federation,
        clock=lambda: clock["now"],
        class_use=lambda group, resource: used.get(group, 0) if resource == GPU else 0,
    )
    lab.save({"title": "ML-101", "group": "ml-101", "profile": "gpu1", "students": 4, "start": "2026-12-03T10:00", "end": "11:00"}, "tina")
    lab.clock_at = clock
    lab.used = used
    classes.provide(lab.goes_first, lab.hold_for)
    yield lab
    classes.provide(None, None)


def test_the_class_goes_first_only_during_its_lab(book):
    student, outsider = request("sam", "ml-101"), request("oli", "cv-200")
    assert not book.goes_first(student)  # booked, not on yet
    assert classes.hold_for(outsider) is None
    book.clock_at["now"] = IN_LAB.timestamp()
    assert book.goes_first(student) and not book.goes_first(outsider)
    hold = classes.hold_for(outsider)
    assert hold == classes.Hold(4, "4 GPUs are held for the lab ML-101 until 11:00.")
    assert classes.hold_for(student) is None  # nothing is held from the class itself
    book.clock_at["now"] = dt.datetime(2026, 12, 3, 11, 0, tzinfo=UTC).timestamp()
    assert not book.goes_first(student) and classes.hold_for(outsider) is None


def test_outsiders_get_only_what_the_class_leaves(book):
    book.clock_at["now"] = IN_LAB.timestamp()
    outsider, student = request("oli", "cv-200"), request("sam", "ml-101")
    # 5 free, 4 held: one is left for others
    assert classes.refusal(outsider, lambda: [("origin", 3), ("donor-1", 2)]) is None
    refused = classes.refusal(outsider, lambda: [("origin", 3), ("donor-1", 1)])
    assert refused is not None and refused.reason == "4 GPUs are held for the lab ML-101 until 11:00."
    assert classes.refusal(student, lambda: [("origin", 1)]) is None
    # each GPU a student takes is no longer held for the class (as seen a second later at most)
    book.used["ml-101"] = 3
    book._used.clear()
    assert classes.hold_for(outsider).sentence == "1 GPU is held for the lab ML-101 until 11:00."
    assert classes.refusal(outsider, lambda: [("origin", 3), ("donor-1", 1)]) is None


def test_a_class_in_line_is_ahead_of_the_others_and_first_come_among_itself():
    tracker = CapacityTracker(None, settings_from_config(None))
    tracker.enqueue("oli/", GPU, 1)
    tracker.enqueue("ann/", GPU, 1)
    tracker.enqueue("sam/", GPU, 1, first=True)
    tracker.enqueue("max/", GPU, 1)
    tracker.enqueue("eve/", GPU, 1, first=True)
    assert [tracker.queue_position(k) for k in ("sam/", "eve/", "oli/", "ann/", "max/")] == [1, 2, 3, 4, 5]
    tracker.dequeue("sam/")
    assert tracker.queue_position("eve/") == 1 and tracker.queue_position("oli/") == 2


def test_the_report_says_who_started_how_fast_and_what_was_used(book):
    lab_start = dt.datetime(2026, 12, 3, 10, 0, tzinfo=UTC).timestamp()
    book.sources["members"] = lambda group: ["sam", "eve", "max", "kim"]
    book.sources["counts_idle"] = lambda: True
    # sam's GPU from 09:50 to 10:40 (2 GPUs), eve's from 10:20 until now; a CPU-only row is not counted
    book.sources["usage"] = lambda group, first, last: [
        {"uid": "a", "resource": GPU, "started": lab_start - 600, "ended": lab_start + 2400, "count": 2, "idle_seconds": 600.0},
        {"uid": "b", "resource": GPU, "started": lab_start + 1200, "ended": None, "count": 1, "idle_seconds": 0.0},
        {"uid": "c", "resource": "example.com/fpga", "started": lab_start, "ended": None, "count": 1, "idle_seconds": 0.0},
    ]
    with pytest.raises(BookingError, match="^The lab ML-101 has not begun yet.$"):
        book.report(book.bookings()[0].id)
    book.clock_at["now"] = IN_LAB.timestamp()
    student = frozenset({"ml-101"})
    for user, asked, ready in (("sam", 0, 20), ("eve", 60, 100), ("max", 90, None)):
        book.note_start(user, student, IN_LAB.timestamp() - 1000 + asked, None)
        if ready is not None:
            book.note_start(user, student, IN_LAB.timestamp() - 1000 + asked, IN_LAB.timestamp() - 1000 + ready)
    book.note_start("oli", frozenset({"cv-200"}), IN_LAB.timestamp(), None)  # not in the class
    book.clock_at["now"] = dt.datetime(2026, 12, 3, 11, 5, tzinfo=UTC).timestamp()
    report = book.report(book.bookings()[0].id)
    assert report["over"] and report["expected"] == 4
    assert report["started"] == ["eve", "sam"] and report["still_waiting"] == ["max"] and report["never_started"] == ["kim"]
    assert report["seconds_to_ready"] == {"p50": 20.0, "p95": 40.0, "measured": 2}
    # sam 09:50-10:40 x 2 within 09:45-11:00, eve 10:20-11:00: 100 + 40 GPU-minutes; booked 4 x 75 minutes
    assert report["gpu_hours"] == {"used": round(140 / 60, 2), "booked": 5.0, "held_idle": round(600 / 3600, 2)}


def test_servers_and_kernels_read_what_is_free_from_the_trackers_snapshot(book):
    book.clock_at["now"] = IN_LAB.timestamp()

    def site(free):
        return SimpleNamespace(total=lambda resource: SimpleNamespace(free=free if resource == GPU else 0))

    snapshot = SimpleNamespace(sites={"origin": site(2), "donor-1": site(3)})
    assert classes.refusal_on(request("oli", "cv-200"), lambda: snapshot) is None  # 5 free, 4 held
    snapshot.sites["donor-1"] = site(2)
    assert classes.refusal_on(request("oli", "cv-200"), lambda: snapshot).reason.startswith("4 GPUs are held")
    # a request that may use the origin only sees the origin's GPUs
    assert classes.refusal_on(GPURequest(GPU, 1, "oli", frozenset(), "gpu1", ("origin",)), lambda: snapshot) is not None
