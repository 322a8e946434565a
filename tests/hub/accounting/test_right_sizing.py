"""Right-sizing: the smallest profile a user's past GPU sessions would have fitted, and the
profiles whose sessions use a small share of what they hold."""

from __future__ import annotations

import pytest

from jupyter_gpuburst.hub.accounting.rightsizing import (
    GB,
    GIB,
    Offer,
    oversized_profiles,
    suggestion,
    unit_memory_bytes,
)
from jupyter_gpuburst.hub.accounting.store import Session, Use

GPU = "nvidia.com/gpu"
MIG_1G = "nvidia.com/mig-1g.10gb"
MIG_3G = "nvidia.com/mig-3g.40gb"
A100 = 40 * GIB

OFFERS = [
    Offer("gpu-1", "1 GPU", GPU, 1),
    Offer("gpu-2", "2 GPUs", GPU, 2),
    Offer("mig-3g", "MIG slice (3g.40gb)", MIG_3G, 1),
    Offer("mig-1g", "MIG slice (1g.10gb)", MIG_1G, 1),
]


def unit(resource: str) -> float | None:
    return unit_memory_bytes(resource, {GPU: 40.0})


def session(
    peak_gib: float, resource: str = GPU, count: int = 1, profile: str = "gpu-1", started: float = 0.0, util: float = 0.1
) -> Session:
    total = (unit(resource) or 0.0) * count
    use = Use(peak_gib * GIB, total, min(1.0, util * 3), util * 10, 10)
    return Session(
        uid=f"u{started}-{profile}",
        pod="jhub/p",
        key="alice/",
        user="alice",
        groups=(),
        profile=profile,
        site="origin",
        resource=resource,
        count=count,
        mode="server",
        started=started,
        counted_until=started,
        use=use,
    )


def latest_first(*peaks_gib: float, **kwargs) -> list[Session]:
    return [session(p, started=1000.0 - i, **kwargs) for i, p in enumerate(peaks_gib)]


def test_five_sessions_that_peaked_at_6_gib_of_a_whole_gpu_are_told_a_1g_slice_would_do():
    text = suggestion(latest_first(6, 4, 5.5, 2, 3), OFFERS, unit, wanted=5, headroom=0.2)
    assert text == 'Your last 5 GPU sessions peaked at 6 GiB of GPU memory: a MIG 1g.10gb slice would do ("MIG slice (1g.10gb)").'


def test_the_peak_with_headroom_must_fit_so_a_larger_slice_is_suggested():
    # 8.5 GiB + 20% is more than the 10 GB slice holds (9.3 GiB): the 3g.40gb slice
    text = suggestion(latest_first(8.5, 1, 1, 1, 1), OFFERS, unit, wanted=5, headroom=0.2)
    assert "peaked at 8.5 GiB" in text and "a MIG 3g.40gb slice would do" in text
    # without the margin the 1g slice would do
    assert "1g.10gb" in suggestion(latest_first(8.5, 1, 1, 1, 1), OFFERS, unit, wanted=5, headroom=0.0)


def test_two_gpus_that_used_one_gpus_worth_are_told_one_gpu_would_do():
    sessions = latest_first(30, 20, 25, 28, 22, resource=GPU, count=2, profile="gpu-2")
    whole_gpus = [o for o in OFFERS if o.resource == GPU]
    assert suggestion(sessions, whole_gpus, unit, wanted=5, headroom=0.2) == (
        'Your last 5 GPU sessions peaked at 30 GiB of GPU memory: one GPU would do ("1 GPU").'
    )
    # where a 40 GB slice is offered, it holds 36 GiB too, and is smaller still
    assert "a MIG 3g.40gb slice would do" in suggestion(sessions, OFFERS, unit, wanted=5, headroom=0.2)


def test_too_few_sessions_say_nothing():
    assert suggestion(latest_first(6, 4, 5, 2), OFFERS, unit, wanted=5, headroom=0.2) == ""
    assert suggestion(latest_first(6, 4, 5, 2, 3), OFFERS, unit, wanted=0, headroom=0.2) == ""  # turned off


def test_nothing_smaller_that_fits_says_nothing():
    # already on the smallest slice
    assert suggestion(latest_first(3, 3, 3, 3, 3, resource=MIG_1G, profile="mig-1g"), OFFERS, unit, wanted=5, headroom=0.2) == ""
    # a whole GPU used in full: nothing smaller holds it
    assert suggestion(latest_first(38, 30, 30, 30, 30), OFFERS, unit, wanted=5, headroom=0.2) == ""
    # only profiles the user may pick count: without slices, one GPU is already the smallest
    assert suggestion(latest_first(6, 4, 5, 2, 3), OFFERS[:2], unit, wanted=5, headroom=0.2) == ""


def test_only_the_latest_sessions_are_read():
    # the five latest peaked at 6 GiB; an older one at 30 is not among them
    sessions = [*latest_first(6, 4, 5.5, 2, 3), session(30, started=1.0)]
    assert "peaked at 6 GiB" in suggestion(sessions, OFFERS, unit, wanted=5, headroom=0.2)
    assert "3g.40gb" in suggestion(sessions, OFFERS, unit, wanted=6, headroom=0.2)


@pytest.mark.parametrize(
    ("resource", "expected"),
    [
        (MIG_1G, 10 * GB),
        ("nvidia.com/mig-2g.20gb", 20 * GB),
        (MIG_3G, 40 * GB),
        ("nvidia.com/mig-7g.80gb", 80 * GB),
        (GPU, 40 * GIB),  # configured
        ("example.com/fpga", None),  # not known: never suggested
    ],
)
def test_a_profiles_gpu_memory_comes_from_the_mig_name_or_the_config(resource, expected):
    assert unit(resource) == expected


def test_a_whole_gpus_memory_is_what_sessions_measured_without_config():
    measured = [session(2, count=2)]  # 2 × 40 GiB measured
    measured[0].use.memory_total_bytes = 80 * GIB
    assert unit_memory_bytes(GPU, {}, measured) == 40 * GIB
    assert unit_memory_bytes(GPU, {}, []) is None
    # a donor's 80 GiB GPUs under the same name: what is suggested must fit the origin's 40 GiB
    bigger = session(2)
    bigger.use.memory_total_bytes = 80 * GIB
    assert unit_memory_bytes(GPU, {}, [*measured, bigger]) == 40 * GIB


def test_the_admin_list_has_the_profiles_whose_sessions_use_a_small_share():
    sessions = [
        *latest_first(6, 4, 5, 2, 3, profile="gpu-1", util=0.05),  # ~10% of 40 GiB
        *latest_first(35, 30, 38, 36, 33, profile="big-model"),  # ~85%
        *latest_first(4, 5, profile="rare"),  # too few to judge
    ]
    listed = oversized_profiles(sessions, unit, small_share=0.5, min_sessions=5)
    assert [p["profile"] for p in listed] == ["gpu-1"]
    [row] = listed
    assert row["sessions"] == 5 and row["held_gib"] == 40.0
    assert row["median_peak_gib"] == 4.0 and row["max_peak_gib"] == 6.0
    assert row["median_memory_share"] == pytest.approx(0.1)
    assert row["mean_utilization"] == pytest.approx(0.05) and row["peak_utilization"] == pytest.approx(0.15)
