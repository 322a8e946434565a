"""Small-scale runs of the spawn and redirect benchmarks (the full ones: benchmarks/README.md)."""

from __future__ import annotations

import pytest

from jupyter_gpuburst.bench import redirect, spawn

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


async def test_spawn_benchmark_small(tmp_path):
    result = await spawn.run(users=5, local_gpus=2, donor_gpus=8, state_dir=tmp_path, start_timeout=60, repeats=2)
    assert result["failures"] == []
    # the order alternates round by round, and the phases are reported as they ran
    assert [p["spawner"] for p in result["phases"]] == [spawn.BASELINE, spawn.GPUBURST, spawn.GPUBURST, spawn.BASELINE]
    assert result["order"].startswith("AB BA ")
    assert all(p["ready"] == 5 for p in result["phases"])
    baseline, gpu = result["phases"][:2]
    # GPUBurstSpawner fills the origin first; both spawners' pods are bound somewhere real
    assert gpu["sites"] == {"origin": 2, "donor-1": 3}
    assert {site: q["n"] for site, q in gpu["spawn_s_by_site"].items()} == gpu["sites"]
    assert sum(baseline["sites"].values()) == 5 and "unbound" not in baseline["sites"]
    assert result["failed_scheduling_pinned"] == 0
    assert result["redirects"] == 0
    assert result["extra_api_reads_per_spawn"] <= 0
    assert 0 < gpu["p50_spawn_s"] <= gpu["p95_spawn_s"] <= gpu["max_spawn_s"]
    assert result["p95_ratio"]["per_round"] and result["p95_ratio"]["median"] > 0
    assert set(result["checks"]) == {
        "all_ready",
        "no_failed_scheduling_of_pinned_pods",
        "no_redirects",
        "every_phase_cleared",
        "no_extra_api_reads",
        "p95_ratio_within_goal",
    }
    # each phase left the federation clear for the next, and says how long that took
    assert result["checks"]["every_phase_cleared"]
    assert all(p["cleared_after"]["left"] == {} and p["cleared_after"]["seconds"] >= 0 for p in result["phases"])


async def test_redirect_benchmark_small(tmp_path):
    result = await redirect.run(runs=2, state_dir=tmp_path)
    assert result["failures"] == []
    assert result["redirected"] == result["ready"] == result["samples"] == 2
    assert result["redirects_metric"] == 2
    assert len(result["redirect_s_all"]) == 2
    # the spawner's own move, not the hub's 120 s start timeout
    assert 0 <= result["redirect_s"]["min"] <= result["redirect_s"]["p50"] <= result["redirect_s"]["max"] <= 15.0
    assert sum(m["n"] for m in result["modes"]) == 2
    # whether the slowest move is within the 2 s goal, this machine's load decides: the
    # benchmark's check, not this test's, which sees that it judges by that goal
    assert result["checks"]["all_redirected"]
    assert result["checks"]["redirect_max_within_goal"] == (result["redirect_s"]["max"] <= 2.0)


def test_failed_scheduling_count_sees_events_about_our_pods():
    """The check can fail: FailedScheduling events about the phase's pods are counted, others not."""

    class FakeStore:
        @staticmethod
        def list(rtype):
            assert rtype == "events"
            return [
                {"reason": "FailedScheduling", "involvedObject": {"name": "jupyter-b0u001"}},
                {"reason": "FailedScheduling", "involvedObject": {"name": "jupyter-a0u001"}},
                {"reason": "Scheduled", "involvedObject": {"name": "jupyter-b0u002"}},
            ], "3"

    class FakeFederation:
        class origin:  # noqa: N801 - mimics Federation.origin
            store = FakeStore()

    assert spawn.failed_scheduling(FakeFederation(), "jupyter-b0u") == 1
    assert spawn.failed_scheduling(FakeFederation(), "jupyter-c0u") == 0
