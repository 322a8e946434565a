"""The capacity page's 24-hour chart: steps on a time axis and a GPU axis, a legend, held idle
once it is known, and the same figures as a sentence and hourly rows for screen readers."""

from __future__ import annotations

from jupyter_gpuburst.hub.accounting.daychart import HEIGHT, LEFT, RIGHT, TOP, WIDTH, day_charts, gpu_ticks

GPU = "nvidia.com/gpu"
NOON = 1_795_003_200.0 - (1_795_003_200.0 % 86400) + 12 * 3600  # a UTC noon


def test_axes_legend_and_steps():
    samples = [
        (NOON - 6 * 3600, "origin", GPU, 6, 1, 0),
        (NOON - 2 * 3600, "origin", GPU, 6, 3, 1),
        (NOON, "origin", GPU, 6, 3, 0),
    ]
    [chart] = day_charts(samples, NOON)
    # GPUs: 0 to 6 in steps of 2; time: every 6 hours in UTC, and "now" at the right edge
    assert [t["label"] for t in chart["gpu_axis"]] == ["0", "2", "4", "6"]
    assert [t["label"] for t in chart["time_axis"]] == ["12:00", "18:00", "00:00", "06:00", "now"]
    assert chart["time_axis"][0]["x"] == LEFT and chart["time_axis"][-1]["x"] == WIDTH - RIGHT
    # no idle signal: no idle line, nor a legend entry for it
    assert [item["series"] for item in chart["legend"]] == ["total", "in_use", "reserved"]
    assert set(chart["paths"]) == {"total", "in_use", "reserved"}
    # steps: in use 1 from 06:00, 3 from 10:00 to now; at the top of the axis 6 is y = TOP
    bottom = HEIGHT - 26
    y = {n: round(TOP + (bottom - TOP) * (1 - n / 6), 1) for n in (1, 3, 6)}
    x6 = round(LEFT + (WIDTH - RIGHT - LEFT) * 18 / 24, 1)
    x10 = round(LEFT + (WIDTH - RIGHT - LEFT) * 22 / 24, 1)
    assert chart["paths"]["in_use"] == f"M{x6},{y[1]}H{x10}V{y[3]}H{WIDTH - RIGHT:.1f}V{y[3]}H{WIDTH - RIGHT:.1f}"
    assert chart["paths"]["total"].startswith(f"M{x6},{y[6]:.1f}")
    assert chart["now"] == {"total": 6, "in_use": 3, "reserved": 0}
    assert chart["summary"] == (
        "origin, nvidia.com/gpu, last 24 hours: now 6 total, 3 in use, 0 reserved by spawns starting. Most in use: 3 of 6 at 12:00 UTC."
    )
    assert chart["hours"][0] == {"hour": "12:00", "total": 6, "in_use": 3, "reserved": 0}
    assert chart["hours"][1] == {"hour": "10:00", "total": 6, "in_use": 3, "reserved": 1}


def test_held_idle_is_drawn_once_known_with_gaps_where_it_was_not():
    samples = [
        (NOON - 2 * 3600, "donor-1", GPU, 8, 4, 0, None),
        (NOON - 1800, "donor-1", GPU, 8, 4, 0, 2),
        (NOON, "donor-1", GPU, 8, 4, 0, 1),
    ]
    [chart] = day_charts(samples, NOON)
    assert [item["label"] for item in chart["legend"]][-1] == "held idle"
    assert chart["now"]["idle"] == 1
    assert chart["paths"]["idle"].count("M") == 1  # starts where it became known
    assert "1 held idle" in chart["summary"]
    assert [row["idle"] for row in chart["hours"]] == [1, 2, None]  # 12:00, 11:00, 10:00: not known then


def test_the_gpu_axis_has_at_most_five_whole_ticks():
    assert gpu_ticks(0) == (1, [0, 1])
    assert gpu_ticks(3) == (3, [0, 1, 2, 3])
    assert gpu_ticks(7) == (8, [0, 2, 4, 6, 8])
    top, ticks = gpu_ticks(50)
    assert len(ticks) <= 5 and top >= 50 and ticks[-1] == top
