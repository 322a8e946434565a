"""The place in line and the expected wait a queued student reads, and what they are based on."""

from __future__ import annotations

import pytest

from jupyter_gpuburst.hub.capacity.tracker import CapacityTracker
from jupyter_gpuburst.hub.queue.estimate import HISTORY, SESSIONS, UNKNOWN, Estimate, WaitHistory, estimate, line_message, ordinal
from jupyter_gpuburst.hub.settings import settings_from_config


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (1, "1st"),
        (2, "2nd"),
        (3, "3rd"),
        (4, "4th"),
        (11, "11th"),
        (12, "12th"),
        (13, "13th"),
        (21, "21st"),
        (102, "102nd"),
        (111, "111th"),
    ],
)
def test_ordinals(n, text):
    assert ordinal(n) == text


def test_the_third_in_line_waits_for_the_third_session_to_end():
    ends = [(600.0, 1), (100.0, 1), (230.0, 1), (60.0, 1)]
    wait = estimate(3, 3, ends, per_place_s=5.0)
    assert wait == Estimate(230.0, SESSIONS)
    assert line_message(3, wait) == "You are 3rd in line for a GPU (about 4 min)."


def test_sessions_count_their_gpus_and_requests_ahead_theirs():
    # two GPUs come back at 100 s, the next at 300 s; the head asks 2, this request 1 more
    assert estimate(2, 3, [(100.0, 2), (300.0, 1)], None) == Estimate(300.0, SESSIONS)
    assert estimate(1, 2, [(100.0, 2), (300.0, 1)], None) == Estimate(100.0, SESSIONS)


def test_too_few_known_ends_fall_back_to_recent_waits():
    assert estimate(3, 3, [(100.0, 1)], per_place_s=40.0) == Estimate(120.0, HISTORY)


def test_no_basis_says_unknown():
    wait = estimate(2, 2, [], None)
    assert wait == Estimate(None, UNKNOWN)
    assert line_message(2, wait) == "You are 2nd in line for a GPU (wait time unknown)."
    assert wait.as_dict() == {"seconds": None, "basis": "unknown", "text": "wait time unknown"}


def test_a_session_past_its_deadline_frees_its_gpu_now():
    wait = estimate(1, 1, [(-5.0, 1)], None)
    assert wait == Estimate(0.0, SESSIONS)
    assert line_message(1, wait) == "You are next in line for a GPU (less than a minute)."


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(59, "less than a minute"), (60, "about 1 min"), (61, "about 2 min"), (89 * 60, "about 89 min"), (3 * 3600, "about 3 h")],
)
def test_wait_wording(seconds, text):
    assert text in line_message(4, Estimate(float(seconds), SESSIONS), "2 GPUs")
    assert line_message(4, Estimate(float(seconds), SESSIONS), "2 GPUs").startswith("You are 4th in line for 2 GPUs (")


def test_history_is_wait_per_place_of_recent_requests_only():
    history = WaitHistory(size=3, window_s=100.0)
    assert history.per_place(0.0) is None
    history.record(0.0, 30.0, 1)
    history.record(10.0, 90.0, 2)
    assert history.per_place(20.0) == pytest.approx(40.0)  # 120 s over 3 places
    assert history.per_place(105.0) == pytest.approx(45.0)  # the first is out of the window
    for at in (200.0, 201.0, 202.0):
        history.record(at, 10.0, 1)
    assert history.per_place(203.0) == pytest.approx(10.0)  # only the last three are kept
    history.record(203.0, -1.0, 1)  # a clock that went back is no wait
    history.record(203.0, 5.0, 0)
    assert history.per_place(203.0) == pytest.approx(10.0)


def test_the_hubs_line_counts_the_gpus_of_its_type_ahead_and_learns_from_placed_waits():
    tracker = CapacityTracker(None, settings_from_config(None))
    tracker.enqueue("a/", "nvidia.com/gpu", 2)
    tracker.enqueue("b/", "nvidia.com/mig-1g.10gb", 1)
    tracker.enqueue("c/", "nvidia.com/gpu", 1)
    ends = [(100.0, 2), (300.0, 1), (900.0, 4)]
    # c waits for a's 2 GPUs and its own: the third GPU back; b's slice is another type
    assert tracker.queue_estimate("c/", ends) == Estimate(300.0, SESSIONS)
    assert tracker.queue_estimate("a/", ends) == Estimate(100.0, SESSIONS)
    assert tracker.queue_estimate("nobody/", ends) == Estimate(None, UNKNOWN)
    assert tracker.queue_estimate("b/") == Estimate(None, UNKNOWN)
    # leaving without a place (cancelled, timed out) teaches nothing; a placed wait does
    tracker.dequeue("b/")
    assert tracker.queue_estimate("c/").basis == UNKNOWN
    tracker.dequeue("a/", placed=True)
    assert tracker.queue_position("c/") == 1
    assert tracker.queue_estimate("c/").basis == HISTORY
