"""The ledger counts each pod's GPU-seconds once, across hub restarts, from pod events alone."""

from __future__ import annotations

import datetime as dt

import pytest
from helpers.ledger import DAY0, MIG, Clock, ledger_at, pod, seconds

from jupyter_gpuburst.hub.accounting.dashboard import day_charts


def test_a_pod_is_counted_from_its_binding_to_its_deletion(tmp_path) -> None:
    clock = Clock(DAY0 + 100)
    ledger = ledger_at(tmp_path / "u.sqlite", clock)
    ledger.pod_event("ADDED", "jhub/p", pod("p", node=None))
    clock.t += 50  # pending: not counted
    ledger.pod_event("MODIFIED", "jhub/p", pod("p", count=2))
    clock.t += 30
    ledger.pod_event("MODIFIED", "jhub/p", pod("p", count=2))  # status changes do not restart it
    clock.t += 30
    ledger.pod_event("DELETED", "jhub/p", None)
    clock.t += 1000
    assert seconds(ledger) == pytest.approx(2 * 60)
    assert seconds(ledger, user="bob") == 0


def test_a_hub_that_starts_again_resumes_where_it_counted_and_never_twice(tmp_path) -> None:
    path = tmp_path / "u.sqlite"
    clock = Clock(DAY0 + 100)
    first = ledger_at(path, clock, flush_seconds=60)
    first.pod_event("ADDED", "jhub/p", pod("p", node=None))
    first.pod_event("MODIFIED", "jhub/p", pod("p"))
    first.pod_event("ADDED", "jhub/q", pod("q", node=None))
    first.pod_event("MODIFIED", "jhub/q", pod("q"))
    clock.t += 60
    first.flush()
    clock.t += 25  # the hub is killed here: these 25 s are not on disk yet
    clock.t += 300  # ... and is down for 5 minutes; q is deleted meanwhile
    second = ledger_at(path, clock)
    second.pod_event("ADDED", "jhub/p", pod("p"))  # the first list: p is still there
    second.loaded()
    clock.t += 15
    second.pod_event("DELETED", "jhub/p", None)
    # p held its GPU all along: 60 + 25 + 300 + 15 s; q is ended where it was last counted
    assert seconds(second, group="students") == pytest.approx(400 + 60)
    assert second.store.open_sessions() == {}
    # a third start changes nothing
    third = ledger_at(path, clock)
    third.loaded()
    assert seconds(third) == pytest.approx(460)


def test_usage_is_split_by_day_and_labelled_by_who_where_and_what(tmp_path) -> None:
    clock = Clock(DAY0 + 86400 - 30)
    ledger = ledger_at(tmp_path / "u.sqlite", clock)
    ledger.pod_event("ADDED", "jhub/k", pod("k", node=None, kernel="rec1", resource=MIG, site="donor-a", user="bob", groups=()))
    ledger.pod_event("MODIFIED", "jhub/k", pod("k", kernel="rec1", resource=MIG, site="donor-a", user="bob", groups=()))
    clock.t += 90
    rows = ledger.usage_rows("2000-01-01", "2100-01-01")  # still open: counted up to now
    assert sorted(r["gpu_seconds"] for r in rows) == [30.0, 60.0]
    assert len({r["day"] for r in rows}) == 2
    assert {(r["user"], r["site"], r["resource"], r["mode"], r["profile"]) for r in rows} == {("bob", "donor-a", MIG, "kernel", "gpu")}


def test_a_pod_first_seen_bound_is_counted_from_its_scheduled_condition(tmp_path) -> None:
    clock = Clock(DAY0 + 1000)
    ledger = ledger_at(tmp_path / "u.sqlite", clock)
    bound = pod("p")
    scheduled = dt.datetime.fromtimestamp(DAY0 + 400, dt.UTC).isoformat().replace("+00:00", "Z")
    bound["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled}]
    ledger.pod_event("ADDED", "jhub/p", bound)
    clock.t += 10
    ledger.pod_event("MODIFIED", "jhub/p", {**bound, "status": {"phase": "Succeeded"}})  # finished: GPUs freed
    # bound within the second the condition names: counted from its middle
    assert seconds(ledger) == pytest.approx(609.5)


def test_a_binding_that_reaches_the_hub_late_is_counted_from_the_scheduler_s_second(tmp_path) -> None:
    clock = Clock(DAY0 + 400.2)
    ledger = ledger_at(tmp_path / "u.sqlite", clock)
    ledger.pod_event("ADDED", "jhub/p", pod("p", node=None))  # seen unbound at 400.2
    bound = pod("p")
    scheduled = dt.datetime.fromtimestamp(DAY0 + 400, dt.UTC).isoformat().replace("+00:00", "Z")
    bound["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": scheduled}]
    clock.t = DAY0 + 402.0  # the binding arrives 1.8 s after its second began (a slow watch)
    ledger.pod_event("MODIFIED", "jhub/p", bound)
    clock.t += 10
    ledger.pod_event("DELETED", "jhub/p", None)
    # from 400.5 (the middle of the scheduler's second, after it was seen unbound), not 402
    assert seconds(ledger) == pytest.approx(11.5)


def test_idle_seconds_come_from_the_idle_source(tmp_path) -> None:
    clock = Clock(DAY0 + 100)
    idle: dict = {}
    ledger = ledger_at(tmp_path / "u.sqlite", clock, idle_source=lambda user, server, target: idle.get((user, server, target)))
    ledger.pod_event("ADDED", "jhub/p", pod("p", node=None))
    ledger.pod_event("MODIFIED", "jhub/p", pod("p"))
    clock.t += 100
    idle[("alice", "", "server")] = clock.t - 40  # idle for the last 40 s
    ledger.flush()
    idle.clear()
    clock.t += 50
    ledger.pod_event("DELETED", "jhub/p", None)
    rows = ledger.usage_rows("2000-01-01", "2100-01-01")
    assert sum(r["gpu_seconds"] for r in rows) == pytest.approx(150)
    assert sum(r["idle_seconds"] for r in rows) == pytest.approx(40)


def test_pods_without_gpus_and_pods_not_the_hubs_are_not_counted(tmp_path) -> None:
    clock = Clock(DAY0)
    ledger = ledger_at(tmp_path / "u.sqlite", clock)
    cpu = pod("c")
    cpu["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    ledger.pod_event("ADDED", "jhub/c", cpu)
    ledger.pod_event("ADDED", "jhub/x", None)  # someone else's pod: the tracker passes None
    clock.t += 100
    assert ledger.usage_rows("2000-01-01", "2100-01-01") == []
    assert ledger.open_sessions() == []


def test_the_capacity_chart_ends_at_this_moment_not_at_the_last_sample():
    now = 1_800_000_000.0
    stored = [(now - 240.0, "origin", "nvidia.com/gpu", 2, 0, 0)]  # sampled 4 minutes ago: all free
    reading = [(now, "origin", "nvidia.com/gpu", 2, 2, 0)]  # both GPUs taken since
    [chart] = day_charts(stored + reading, now)
    assert chart["now"] == {"total": 2, "in_use": 2, "reserved": 0}
    assert chart["samples"] == 2
    # a reading at the same moment as a stored sample replaces it: one point per moment
    [chart] = day_charts(reading + [(now, "origin", "nvidia.com/gpu", 2, 1, 0)], now)
    assert chart["now"]["in_use"] == 1 and chart["samples"] == 1
