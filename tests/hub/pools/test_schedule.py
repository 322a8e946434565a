"""Warm pools' schedules: windows parsed as an admin writes them, open and closed at the right
minutes (across midnight and daylight saving time), and what the capacity page says."""

from __future__ import annotations

import datetime as dt
import zoneinfo

import pytest

from jupyter_gpuburst.hub.pools.schedule import describe, is_open, next_change, parse_window, time_zone

ROME = zoneinfo.ZoneInfo("Europe/Rome")


def at(text: str, tz: dt.tzinfo = ROME) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=tz)


@pytest.mark.parametrize(
    "text, days, start, end",
    [
        ("mon-fri 08:30-09:15", {0, 1, 2, 3, 4}, 510, 555),
        ("mon,wed 13:45-14:15", {0, 2}, 825, 855),
        ("sat-mon 22:00-02:00", {5, 6, 0}, 1320, 120),
        ("daily 8:00-8:30", set(range(7)), 480, 510),
        ("08:00-08:30", set(range(7)), 480, 510),
        ("Tue 07:00-07:30", {1}, 420, 450),
    ],
)
def test_windows_parse_as_written(text, days, start, end):
    w = parse_window(text)
    assert (set(w.days), w.start, w.end, w.text) == (days, start, end, text)


@pytest.mark.parametrize(
    "text, reason",
    [
        ("mon-fry 08:30-09:15", "unknown day 'fry'"),
        ("mon-fri 8.30-9.15", "is not like 'mon-fri 08:30-09:15'"),
        ("mon-fri 24:00-09:15", "24:00 is not a time of day"),
        ("mon 09:00-09:00", "opens and closes at the same time"),
        ("", "is not like"),
    ],
)
def test_bad_windows_say_why(text, reason):
    with pytest.raises(ValueError, match=reason):
        parse_window(text)


def test_open_from_start_to_end_on_its_days_only():
    lab = [parse_window("mon-fri 08:30-09:15")]
    assert not is_open(lab, at("2026-11-30T08:29:59"))  # a Monday
    assert is_open(lab, at("2026-11-30T08:30:00"))
    assert is_open(lab, at("2026-11-30T09:14:59"))
    assert not is_open(lab, at("2026-11-30T09:15:00"))
    assert not is_open(lab, at("2026-11-28T08:45:00"))  # a Saturday
    assert is_open([], at("2026-11-28T03:00:00"))  # no schedule: always


def test_a_window_across_midnight_belongs_to_the_day_it_opens():
    night = [parse_window("fri 22:00-02:00")]
    assert is_open(night, at("2026-11-27T23:00:00"))  # Friday night
    assert is_open(night, at("2026-11-28T01:59:00"))  # Saturday, before 02:00
    assert not is_open(night, at("2026-11-28T22:30:00"))  # Saturday night
    assert not is_open(night, at("2026-11-27T01:00:00"))  # Friday early: Thursday's window, not one


def test_next_change_and_what_the_page_says():
    lab = [parse_window("mon-fri 08:30-09:15"), parse_window("wed 13:45-14:15")]
    friday_evening = at("2026-11-27T18:00:00")
    assert next_change(lab, friday_evening) == at("2026-11-30T08:30:00")
    assert describe(lab, friday_evening) == "off until Mon 08:30"
    assert describe(lab, at("2026-11-30T08:40:00")) == "on until 09:15"
    assert describe(lab, at("2026-12-02T10:00:00")) == "off until 13:45"  # Wednesday's second lab
    assert describe([], friday_evening) == "" and next_change([], friday_evening) is None


def test_a_lab_at_nine_stays_at_nine_across_daylight_saving_time():
    lab = [parse_window("daily 08:30-09:15")]
    # Europe/Rome leaves summer time on 25 Oct 2026: the same instant of UTC is 09:45 before and
    # 08:45 after, and the window follows the campus's clock
    before, after = (at(f"{day}T07:45:00", dt.timezone.utc).astimezone(ROME) for day in ("2026-10-24", "2026-10-26"))
    assert not is_open(lab, before) and is_open(lab, after)
    assert next_change(lab, at("2026-10-24T10:00:00")) == at("2026-10-25T08:30:00")


def test_time_zones():
    assert time_zone("UTC") is dt.timezone.utc
    assert time_zone("Europe/Rome") == ROME
    with pytest.raises(ValueError, match="unknown time zone 'Mars/Olympus'"):
        time_zone("Mars/Olympus")
