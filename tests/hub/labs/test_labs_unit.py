"""Lab bookings judged: cost, capacity and conflicts, limits, refusals, and two saves at once."""

from __future__ import annotations

import datetime as dt
import threading
import time
from types import SimpleNamespace

import pytest

from jupyter_gpuburst.hub.labs import cost
from jupyter_gpuburst.hub.labs.book import LabBook
from jupyter_gpuburst.hub.labs.settings import LabSettings
from jupyter_gpuburst.hub.labs.store import LabStore
from jupyter_gpuburst.hub.labs.validation import BookingError

UTC = dt.UTC
NOW = dt.datetime(2026, 12, 1, 9, 0, tzinfo=UTC)  # a Tuesday
GPU = "nvidia.com/gpu"


def snapshot(origin: int = 4, donor: int = 8):
    def site(units):
        return SimpleNamespace(total=lambda resource: SimpleNamespace(allocatable=units if resource == GPU else 0))

    return SimpleNamespace(sites={"origin": site(origin), "donor-1": site(donor)})


def make_book(path=":memory:", groups=("ml-101", "ml-102", "cv-200"), federation=snapshot, **settings) -> LabBook:
    return LabBook(
        LabStore(path),
        LabSettings(**{"warmup_minutes": 15.0, **settings}),
        UTC,
        {"gpu1": (GPU, 1), "gpu2": (GPU, 2)},
        lambda: groups,
        federation,
        clock=NOW.timestamp,
        kernel_profiles={"gpu-1": (GPU, 1), "gpu-2": (GPU, 2)},
    )


def lab(**over) -> dict:
    return {"title": "ML-101", "group": "ml-101", "profile": "gpu1", "students": 4, "start": "2026-12-03T10:00", "end": "12:00", **over}


def test_cost_counts_warmup_and_every_week():
    book = make_book()
    preview = book.preview(lab(weeks=3), "tina")
    # 4 GPUs x (2 h + 15 min warm-up) x 3 weeks
    assert preview["gpu_hours"] == pytest.approx(27.0) and preview["warmup_gpu_hours"] == pytest.approx(3.0)
    assert preview["capacity"] == {"needed": 4, "total": 12, "booked": 0, "left": 12, "fits": True, "conflicts": []}
    assert preview["problem"] is None


def test_capacity_left_names_the_labs_that_hold_it():
    book = make_book()
    book.save(lab(group="ml-102", title="ML-102", students=10), "ann")
    preview = book.preview(lab(start="2026-12-03T11:30", end="13:00"), "tina")
    assert preview["capacity"]["booked"] == 10 and not preview["capacity"]["fits"]
    assert preview["capacity"]["conflicts"] == ["ML-102 (ml-102, ann) holds 10 Thu 2026-12-03 09:45-12:00"]
    assert preview["problem"].startswith("Not enough GPUs then: the class needs 4 nvidia.com/gpu, its sites have 12 and other labs hold 10")
    with pytest.raises(BookingError, match="Not enough GPUs"):
        book.save(lab(start="2026-12-03T11:30", end="13:00"), "tina")
    assert len(book.bookings()) == 1
    # a lab whose warm-up opens as the other ends holds nothing of it
    assert book.preview(lab(start="2026-12-03T12:15", end="13:00"), "tina")["capacity"]["booked"] == 0


@pytest.mark.parametrize(
    ("over", "sentence"),
    [
        ({"start": "2026-11-30T10:00"}, "The lab would start in the past (Mon 2026-11-30 10:00-12:00)."),
        ({"group": "nope"}, "There is no group 'nope' on this hub."),
        ({"profile": "gpu9"}, "There is no GPU profile 'gpu9' (offered: gpu1, gpu2)."),
        ({"end": "09:00"}, "The lab must end after it starts."),
        ({"students": 0}, "The students must be a whole number from 1 to 1000."),
        ({"start": "tomorrow"}, "The start 'tomorrow' is not a date and time like 2026-12-07T10:00."),
        ({"sites": "origin"}, 'The preferred sites must be a list of site names like ["origin", "donor-1"].'),
        ({"sites": ["origin", "donor-9"]}, "There is no site 'donor-9' (sites: donor-1, origin)."),
    ],
)
def test_bad_bookings_get_one_sentence_and_change_nothing(over, sentence):
    book = make_book()
    with pytest.raises(BookingError) as refused:
        book.save(lab(**over), "tina")
    assert str(refused.value) == sentence
    assert book.bookings() == [] and book.store.bookings() == []


def test_a_profile_the_group_may_not_use():
    book = make_book(group_profiles={"ml-101": ["gpu1"]})
    with pytest.raises(BookingError, match=r"^The group ml-101 may not use the profile gpu2 \(it may use: gpu1\)\.$"):
        book.save(lab(profile="gpu2"), "tina")
    assert book.save(lab(group="ml-102", profile="gpu2"), "tina").gpus == 2


def test_overlapping_its_own_class():
    book = make_book()
    book.save(lab(weeks=2), "tina")
    with pytest.raises(BookingError, match=r"^ml-101 already has a lab then: ML-101, Thu 2026-12-10 10:00-12:00\.$"):
        book.save(lab(start="2026-12-10T11:00", end="13:00", title="again"), "bob")
    # another class at the same time is no conflict of its own
    assert book.save(lab(group="ml-102", students=2), "bob").group == "ml-102"


def test_weekly_limits_per_teacher_and_per_group():
    book = make_book(teacher_weekly_hours={"*": 10.0, "boss": 100.0}, group_weekly_hours={"cv-200": 5.0})
    book.save(lab(), "tina")  # 4 x 2.25 = 9 GPU-hours
    with pytest.raises(
        BookingError, match=r"^The bookings of tina would take 13\.5 GPU-hours in the week of 2026-11-30, over the limit of 10 per week\.$"
    ):
        book.save(lab(group="ml-102", students=2), "tina")
    # the next week is another week; another teacher has a limit of their own
    assert book.save(lab(group="ml-102", students=2, start="2026-12-08T10:00"), "tina")
    assert book.save(lab(group="ml-102", students=4, start="2026-12-03T13:00", end="15:00"), "boss")
    with pytest.raises(BookingError, match=r"^The labs of the group cv-200 would take 9\.0 GPU-hours"):
        book.save(lab(group="cv-200"), "boss")


def test_approval_holds_the_gpus_but_fills_no_pool():
    book = make_book(require_approval=True)
    booking = book.save(lab(), "tina")
    assert booking.status == "pending"
    at_lab = dt.datetime(2026, 12, 3, 10, 30, tzinfo=UTC)
    assert book.pools(at_lab) == []
    assert book.preview(lab(group="ml-102", students=10), "bob")["capacity"]["booked"] == 4
    book.set_status(booking.id, "approved")
    assert [(p.site, p.profile, p.count) for p in book.pools(at_lab)] == [("origin", "gpu1", 4)]


def test_pools_follow_the_warmup_and_spill_to_the_next_site():
    book = make_book()
    book.save(lab(students=6, sites=["origin", "donor-1"]), "tina")
    before, warm, after = (dt.datetime(2026, 12, 3, h, m, tzinfo=UTC) for h, m in ((9, 44), (9, 45), (12, 0)))
    assert book.pools(before) == [] and book.pools(after) == []
    assert [(p.site, p.count) for p in book.pools(warm)] == [("donor-1", 2), ("origin", 4)]


def test_a_lab_in_kernel_mode_pre_starts_a_gpu_kernel_per_student():
    book = make_book()
    booking = book.save(lab(mode="kernel", profile="gpu-2", students=3, sites=["origin", "donor-1"]), "tina")
    assert (booking.mode, booking.resource, booking.gpus, booking.demand) == ("kernel", GPU, 2, 6)
    at_lab = dt.datetime(2026, 12, 3, 10, 30, tzinfo=UTC)
    # two kernels of 2 GPUs fill the origin's 4, the third waits on the donor
    assert [(p.site, p.profile, p.count, p.kind) for p in book.pools(at_lab)] == [
        ("donor-1", "gpu-2", 1, "kernels"),
        ("origin", "gpu-2", 2, "kernels"),
    ]
    # its kernels count against other labs' GPUs as servers do
    assert book.preview(lab(group="ml-102", students=8), "bob")["capacity"]["booked"] == 6


@pytest.mark.parametrize(
    ("over", "sentence"),
    [
        ({"mode": "kernel", "profile": "gpu1"}, "There is no GPU kernel profile 'gpu1' (offered: gpu-1, gpu-2)."),
        ({"mode": "kernel", "profile": "gpu-2"}, "The group ml-101 may not use the GPU kernel profile gpu-2 (it may use: gpu-1)."),
        ({"mode": "kernels"}, 'The mode must be "server" (a GPU server per student) or "kernel" (GPU kernels of a CPU server).'),
        # a server profile's rule is not a kernel profile's, nor the other way round
        ({"profile": "gpu-1"}, "There is no GPU profile 'gpu-1' (offered: gpu1, gpu2)."),
    ],
)
def test_kernel_profiles_a_class_may_not_book(over, sentence):
    book = make_book(group_kernel_profiles={"ml-101": ["gpu-1"]}, group_profiles={"ml-101": ["gpu1"]})
    with pytest.raises(BookingError) as refused:
        book.save(lab(**over), "tina")
    assert str(refused.value) == sentence
    assert book.bookings() == []
    assert book.save(lab(mode="kernel", profile="gpu-1"), "tina").mode == "kernel"


def test_bookings_survive_a_new_store_on_the_same_file(tmp_path):
    path = tmp_path / "labs.sqlite"
    book = make_book(path)
    saved = [book.save(lab(sites=["donor-1"]), "tina"), book.save(lab(group="ml-102", mode="kernel", profile="gpu-1"), "tina")]
    again = {b.id: b for b in make_book(path).bookings()}
    assert again == {b.id: b for b in saved} and again[saved[0].id].start == dt.datetime(2026, 12, 3, 10, 0, tzinfo=UTC)
    assert again[saved[1].id].mode == "kernel"


def test_two_teachers_saving_at_once_cannot_both_take_the_last_gpus(tmp_path):
    """Two hub processes (two connections to one file) judge each save in one transaction."""
    path = tmp_path / "labs.sqlite"

    def slow_snapshot():
        time.sleep(0.3)  # each judges slowly: without one transaction, both would read no booking
        return snapshot()

    books = [make_book(path, federation=slow_snapshot), make_book(path, federation=slow_snapshot)]
    start = threading.Barrier(2)
    results: list[object] = [None, None]

    def save(i: int) -> None:
        start.wait()
        try:
            # each alone fits (12 GPUs); together they would need 16
            results[i] = books[i].save(lab(group=("ml-101", "ml-102")[i], students=8), ("tina", "bob")[i])
        except BookingError as exc:
            results[i] = exc

    threads = [threading.Thread(target=save, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    refused = [r for r in results if isinstance(r, BookingError)]
    assert len(refused) == 1 and str(refused[0]).startswith("Not enough GPUs then"), results
    assert len(make_book(path).bookings()) == 1


def test_windows_and_week_of_a_lab_crossing_midnight_in_the_pools_zone():
    booking = make_book().save(lab(start="2026-12-06T23:00", end="2026-12-07T01:00"), "tina")
    assert cost.hours_by_week(booking, dt.timedelta(minutes=15), UTC) == {dt.date(2026, 11, 30): pytest.approx(9.0)}
